package driver

import (
	"errors"
	"testing"
)

func TestCredentialSpecValidate(t *testing.T) {
	ok := CredentialSpec{UserName: "u", Owner: "o", Bucket: "b"}
	for name, tc := range map[string]struct {
		reason string
		change func(*CredentialSpec)
		want   string // the error's text, "" for none
	}{
		"Valid":          {"every name set, a known key mode", func(*CredentialSpec) {}, ""},
		"KeepOnlyKeyID":  {"KeepOnlyKey with the key to keep", func(s *CredentialSpec) { s.Keys, s.KeyID = KeepOnlyKey, "k" }, ""},
		"NoUserName":     {"the user is named by the caller", func(s *CredentialSpec) { s.UserName = "" }, "user name is empty: " + ErrInvalid.Error()},
		"NoOwner":        {"a user without a mark is no one's", func(s *CredentialSpec) { s.Owner = "" }, "owner is empty: " + ErrInvalid.Error()},
		"NoBucket":       {"the credential reaches one bucket", func(s *CredentialSpec) { s.Bucket = "" }, "bucket is empty: " + ErrInvalid.Error()},
		"FirstEmpty":     {"the first empty name is the one named", func(s *CredentialSpec) { s.Owner, s.Bucket = "", "" }, "owner is empty: " + ErrInvalid.Error()},
		"UnknownKeyMode": {"a key mode past the known ones", func(s *CredentialSpec) { s.Keys = KeepOnlyKey + 1 }, "key mode 3: " + ErrInvalid.Error()},
		"KeepOnlyNoKey":  {"KeepOnlyKey must name the key to keep", func(s *CredentialSpec) { s.Keys = KeepOnlyKey }, "key mode KeepOnlyKey without a key id: " + ErrInvalid.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			spec := ok
			tc.change(&spec)
			err := spec.Validate()
			if tc.want == "" {
				if err != nil {
					t.Errorf("%s\nValidate() = %v, want nil", tc.reason, err)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s\nValidate() = %v, want %q wrapping ErrInvalid", tc.reason, err, tc.want)
			}
		})
	}
}
