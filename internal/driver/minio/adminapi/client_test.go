package adminapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewRefuses(t *testing.T) {
	tests := map[string]struct {
		reason string
		cfg    Config
		want   string
	}{
		"NoScheme": {
			reason: "a host without a scheme is not a URL the client can call",
			cfg:    Config{Endpoint: "minio:9000", AccessKey: "a", SecretKey: "s"},
			want:   "want an http or https URL",
		},
		"Path": {
			reason: "the admin API sits at the server's root: a path would be dropped silently",
			cfg:    Config{Endpoint: "http://minio:9000/prefix", AccessKey: "a", SecretKey: "s"},
			want:   "want scheme://host[:port] only",
		},
		"UserInfo": {
			reason: "keys in the URL would end up in error messages",
			cfg:    Config{Endpoint: "http://root:pw@minio:9000", AccessKey: "a", SecretKey: "s"},
			want:   "want scheme://host[:port] only",
		},
		"NoHost": {
			reason: "a URL without a host has nowhere to go",
			cfg:    Config{Endpoint: "http://", AccessKey: "a", SecretKey: "s"},
			want:   "no host",
		},
		"NoSecret": {
			reason: "without the secret key nothing can be signed or encrypted",
			cfg:    Config{Endpoint: "http://minio:9000", AccessKey: "a"},
			want:   "access key and secret key are required",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s\nNew: got %v, want an error containing %q", tc.reason, err, tc.want)
			}
		})
	}
	if _, err := New(Config{Endpoint: "https://minio.example.com:9000/", AccessKey: "a", SecretKey: "s"}); err != nil {
		t.Errorf("New with a trailing slash: %v", err)
	}
}

func TestAnswerError(t *testing.T) {
	tests := map[string]struct {
		reason string
		status int
		answer string
		want   *Error
		is     error
		text   string
	}{
		"NoSuchUser": {
			reason: "MinIO's JSON error gives the code and message, and the sentinel",
			status: 404,
			answer: `{"Code":"XMinioAdminNoSuchUser","Message":"The specified user does not exist.","Resource":"/minio/admin/v3/user-info","RequestId":"1","HostId":"2"}`,
			want:   &Error{Op: "user-info", StatusCode: 404, Code: "XMinioAdminNoSuchUser", Message: "The specified user does not exist."},
			is:     ErrNoSuchUser,
			text:   "minio admin user-info: XMinioAdminNoSuchUser (HTTP 404): The specified user does not exist.",
		},
		"SignatureDoesNotMatch": {
			reason: "a wrong secret key is said to be rejected credentials",
			status: 403,
			answer: `{"Code":"SignatureDoesNotMatch","Message":"The request signature we calculated does not match the signature you provided."}`,
			want:   &Error{Op: "user-info", StatusCode: 403, Code: "SignatureDoesNotMatch", Message: "The request signature we calculated does not match the signature you provided."},
			is:     ErrCredentialsRejected,
			text:   "minio admin user-info: credentials rejected: SignatureDoesNotMatch (HTTP 403): The request signature",
		},
		"XML": {
			reason: "an error in S3's XML gives the code and message too",
			status: 400,
			answer: `<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<Error><Code>InvalidArgument</Code><Message>Invalid quota config</Message><Resource>/minio/admin/v3/set-bucket-quota</Resource></Error>`,
			want:   &Error{Op: "user-info", StatusCode: 400, Code: "InvalidArgument", Message: "Invalid quota config"},
			text:   "minio admin user-info: InvalidArgument (HTTP 400): Invalid quota config",
		},
		"NotJSON": {
			reason: "an answer that is not MinIO's (a proxy's page) is quoted, shortened",
			status: 502,
			answer: "<html>" + strings.Repeat("bad gateway ", 40) + "</html>",
			want:   &Error{Op: "user-info", StatusCode: 502, Message: ("<html>" + strings.Repeat("bad gateway ", 40))[:maxErrorText] + "..."},
			text:   "minio admin user-info: HTTP 502: <html>bad gateway",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := answerError("user-info", tc.status, []byte(tc.answer))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nanswerError (-want +got):\n%s", tc.reason, diff)
			}
			if tc.is != nil && !errors.Is(got, tc.is) {
				t.Errorf("%s\n%v does not match %v", tc.reason, got, tc.is)
			}
			if !strings.HasPrefix(got.Error(), tc.text) {
				t.Errorf("%s\nError() = %q, want it to start with %q", tc.reason, got.Error(), tc.text)
			}
		})
	}
}
