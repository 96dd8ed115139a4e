package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// UserInfo is what the server tells of a user (never its secret key).
type UserInfo struct {
	// Enabled is false for a user whose key the server refuses
	// (status "disabled").
	Enabled bool
	// Policies are the canned policies attached to the user, sorted as
	// the server keeps them.
	Policies []string
	// Groups are the groups the user belongs to.
	Groups []string
	// UpdatedAt is when the user was last changed.
	UpdatedAt time.Time
}

// userInfoWire is a user as the server sends it: policyName holds the
// attached policies, comma-separated.
type userInfoWire struct {
	PolicyName string    `json:"policyName"`
	Status     string    `json:"status"`
	MemberOf   []string  `json:"memberOf"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

func (w userInfoWire) info() UserInfo {
	info := UserInfo{Enabled: w.Status == "enabled", Groups: w.MemberOf, UpdatedAt: w.UpdatedAt}
	if w.PolicyName != "" {
		info.Policies = strings.Split(w.PolicyName, ",")
	}
	return info
}

// AddUser creates the user accessKey with the secret key secretKey,
// enabled, or, if it exists, gives it that secret key (the old one stops
// working) and enables it; its policies stay as they are. The secret key
// travels encrypted. MinIO refuses access keys shorter than 3 characters
// or holding '=' or ',', and secret keys shorter than 8.
func (c *Client) AddUser(ctx context.Context, accessKey, secretKey string) error {
	if accessKey == "" || secretKey == "" {
		return errors.New("minio admin add-user: access key and secret key are required")
	}
	body, err := json.Marshal(struct {
		SecretKey string `json:"secretKey"`
		Status    string `json:"status"`
	}{secretKey, "enabled"})
	if err != nil {
		return fmt.Errorf("minio admin add-user: %w", err)
	}
	_, err = c.do(ctx, call{
		method: http.MethodPut, op: "add-user",
		query: url.Values{"accessKey": {accessKey}},
		body:  body, encryptBody: true,
	})
	return err
}

// SetUserStatus enables or disables the user accessKey; a disabled
// user's keys, its service accounts' too, are refused. A missing user is
// ErrNoSuchUser.
func (c *Client) SetUserStatus(ctx context.Context, accessKey string, enabled bool) error {
	if accessKey == "" {
		return errors.New("minio admin set-user-status: access key is required")
	}
	status := "disabled"
	if enabled {
		status = "enabled"
	}
	_, err := c.do(ctx, call{
		method: http.MethodPut, op: "set-user-status",
		query: url.Values{"accessKey": {accessKey}, "status": {status}},
	})
	return err
}

// RemoveUser deletes the user accessKey and its policy attachments; its key
// stops working at once. A missing user is ErrNoSuchUser.
func (c *Client) RemoveUser(ctx context.Context, accessKey string) error {
	if accessKey == "" {
		return errors.New("minio admin remove-user: access key is required")
	}
	_, err := c.do(ctx, call{
		method: http.MethodDelete, op: "remove-user",
		query: url.Values{"accessKey": {accessKey}},
	})
	return err
}

// UserInfo describes the user accessKey. A missing user is ErrNoSuchUser.
func (c *Client) UserInfo(ctx context.Context, accessKey string) (UserInfo, error) {
	if accessKey == "" {
		return UserInfo{}, errors.New("minio admin user-info: access key is required")
	}
	answer, err := c.do(ctx, call{
		method: http.MethodGet, op: "user-info",
		query: url.Values{"accessKey": {accessKey}},
	})
	if err != nil {
		return UserInfo{}, err
	}
	var w userInfoWire
	if err := json.Unmarshal(answer, &w); err != nil {
		return UserInfo{}, fmt.Errorf("minio admin user-info: decode answer: %w", err)
	}
	return w.info(), nil
}

// ListUsers describes every user the server keeps, by access key. The
// answer travels encrypted.
func (c *Client) ListUsers(ctx context.Context) (map[string]UserInfo, error) {
	answer, err := c.do(ctx, call{method: http.MethodGet, op: "list-users", decryptAnswer: true})
	if err != nil {
		return nil, err
	}
	var wire map[string]userInfoWire
	if err := json.Unmarshal(answer, &wire); err != nil {
		return nil, fmt.Errorf("minio admin list-users: decode answer: %w", err)
	}
	users := make(map[string]UserInfo, len(wire))
	for name, w := range wire {
		users[name] = w.info()
	}
	return users, nil
}
