package driver

import "fmt"

// Invalidf returns an error wrapping ErrInvalid, with the message
// fmt.Errorf makes of format and args: a driver's refusal of a request no
// retry can fix.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, ErrInvalid)...)
}

// RequireNames takes pairs of a name's description and its value
// ("owner", spec.Owner, ...) and returns ErrInvalid (Invalidf) for the
// first empty value, nil when there is none.
func RequireNames(pairs ...string) error {
	for i := 0; i < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return Invalidf("%s is empty", pairs[i])
		}
	}
	return nil
}

// Validate returns ErrInvalid for a spec no driver can make so: an empty
// UserName, Owner or Bucket, an unknown KeyMode, or KeepOnlyKey without a
// KeyID. A driver's EnsureCredential calls it before anything else.
func (s CredentialSpec) Validate() error {
	if err := RequireNames("user name", s.UserName, "owner", s.Owner, "bucket", s.Bucket); err != nil {
		return err
	}
	switch {
	case s.Keys > KeepOnlyKey:
		return Invalidf("key mode %d", s.Keys)
	case s.Keys == KeepOnlyKey && s.KeyID == "":
		return Invalidf("key mode KeepOnlyKey without a key id")
	}
	return nil
}
