// Package jsonnest measures and bounds how deep a JSON text nests objects
// and arrays, by walking encoding/json's tokens: decoding is what fails on
// a text nested too deep (encoding/json stops at 10,000 levels), and a
// record holding such a text could never be read back.
//
// The OSB door and the engine use Exceeds to refuse free-form values
// nested beyond their limit; the stores use it to refuse (and, on read, to
// report) records beyond theirs, and Prune to repair a stored record beyond
// them (written outside bucketbroker: the stores never write one).
package jsonnest
