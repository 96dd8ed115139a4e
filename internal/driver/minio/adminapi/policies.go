package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
)

// AddCannedPolicy creates the canned policy name with the IAM policy
// document policy (JSON), or replaces the document of an existing one; the
// users it is attached to get the new document at once. The server refuses
// a document it cannot parse, or without a Version, and a name with a comma.
func (c *Client) AddCannedPolicy(ctx context.Context, name string, policy []byte) error {
	if name == "" {
		return errors.New("minio admin add-canned-policy: policy name is required")
	}
	if len(policy) == 0 {
		return errors.New("minio admin add-canned-policy: policy document is required")
	}
	_, err := c.do(ctx, call{
		method: http.MethodPut, op: "add-canned-policy",
		query: url.Values{"name": {name}},
		body:  policy,
	})
	return err
}

// CannedPolicy returns the document of the canned policy name, as the
// server re-encodes it: its own field order and indentation, and the
// actions and resources of each statement, which it keeps as sets, in any
// order. A missing policy is ErrNoSuchPolicy.
func (c *Client) CannedPolicy(ctx context.Context, name string) ([]byte, error) {
	if name == "" {
		return nil, errors.New("minio admin info-canned-policy: policy name is required")
	}
	return c.do(ctx, call{
		method: http.MethodGet, op: "info-canned-policy",
		query: url.Values{"name": {name}},
	})
}

// RemoveCannedPolicy deletes the canned policy name, and its attachments to
// users. Removing a policy that does not exist succeeds.
func (c *Client) RemoveCannedPolicy(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("minio admin remove-canned-policy: policy name is required")
	}
	_, err := c.do(ctx, call{
		method: http.MethodDelete, op: "remove-canned-policy",
		query: url.Values{"name": {name}},
	})
	return err
}

// AttachPolicy attaches the canned policies to the user and returns those
// that were newly attached. When all are attached already the server
// refuses with ErrPolicyChangeAlreadyApplied. A missing user is
// ErrNoSuchUser, a missing policy ErrNoSuchPolicy.
func (c *Client) AttachPolicy(ctx context.Context, user string, policies ...string) ([]string, error) {
	return c.policyAssociation(ctx, "attach", user, policies)
}

// DetachPolicy detaches the canned policies from the user and returns those
// that were attached. When none is attached the server refuses with
// ErrPolicyChangeAlreadyApplied.
func (c *Client) DetachPolicy(ctx context.Context, user string, policies ...string) ([]string, error) {
	return c.policyAssociation(ctx, "detach", user, policies)
}

// policyAssociation is an attach or detach call of MinIO's built-in
// identity provider: request and answer travel encrypted.
func (c *Client) policyAssociation(ctx context.Context, operation, user string, policies []string) ([]string, error) {
	op := "idp/builtin/policy/" + operation
	if user == "" {
		return nil, fmt.Errorf("minio admin %s: user is required", op)
	}
	if len(policies) == 0 || slices.Contains(policies, "") {
		return nil, fmt.Errorf("minio admin %s: policy names are required, none empty", op)
	}
	body, err := json.Marshal(struct {
		Policies []string `json:"policies"`
		User     string   `json:"user"`
	}{policies, user})
	if err != nil {
		return nil, fmt.Errorf("minio admin %s: %w", op, err)
	}
	answer, err := c.do(ctx, call{
		method: http.MethodPost, op: op,
		body: body, encryptBody: true, decryptAnswer: true,
	})
	if err != nil {
		return nil, err
	}
	var resp struct {
		Attached []string `json:"policiesAttached"`
		Detached []string `json:"policiesDetached"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, fmt.Errorf("minio admin %s: decode answer: %w", op, err)
	}
	if operation == "attach" {
		return resp.Attached, nil
	}
	return resp.Detached, nil
}
