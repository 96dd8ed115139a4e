// Command illbroker serves the ill-behaved OSB broker of package illbroker
// on a TCP address, as its own process, for tests that kill and restart
// the processes in front of it. Its basic-auth credentials come from
// ILLBROKER_USERNAME and ILLBROKER_PASSWORD; it prints nothing secret.
package main
