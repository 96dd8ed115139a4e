package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// ServiceAccount is a key pair the server keeps under a parent user: it
// has the parent's rights (the parent's policies, read at each request),
// and it is deleted with the parent.
type ServiceAccount struct {
	AccessKey string
	// SecretKey is set only in AddServiceAccount's answer.
	SecretKey string
}

// AddServiceAccount makes a new service account of the user parent, with
// an access key and secret key the server chooses, and no policy of its
// own (it has the parent's). Request and answer travel encrypted. A
// missing parent is ErrNoSuchUser.
func (c *Client) AddServiceAccount(ctx context.Context, parent string) (ServiceAccount, error) {
	const op = "add-service-account"
	if parent == "" {
		return ServiceAccount{}, fmt.Errorf("minio admin %s: parent user is required", op)
	}
	body, err := json.Marshal(struct {
		TargetUser string `json:"targetUser"`
	}{parent})
	if err != nil {
		return ServiceAccount{}, fmt.Errorf("minio admin %s: %w", op, err)
	}
	answer, err := c.do(ctx, call{
		method: http.MethodPut, op: op,
		body: body, encryptBody: true, decryptAnswer: true,
	})
	if err != nil {
		return ServiceAccount{}, err
	}
	var resp struct {
		Credentials struct {
			AccessKey string `json:"accessKey"`
			SecretKey string `json:"secretKey"`
		} `json:"credentials"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		return ServiceAccount{}, fmt.Errorf("minio admin %s: decode answer: %w", op, err)
	}
	if resp.Credentials.AccessKey == "" || resp.Credentials.SecretKey == "" {
		return ServiceAccount{}, fmt.Errorf("minio admin %s: answer without a key pair", op)
	}
	return ServiceAccount{AccessKey: resp.Credentials.AccessKey, SecretKey: resp.Credentials.SecretKey}, nil
}

// ServiceAccounts lists the access keys of the user parent's service
// accounts. The answer travels encrypted. A missing parent has none.
func (c *Client) ServiceAccounts(ctx context.Context, parent string) ([]string, error) {
	const op = "list-service-accounts"
	if parent == "" {
		return nil, fmt.Errorf("minio admin %s: parent user is required", op)
	}
	answer, err := c.do(ctx, call{
		method: http.MethodGet, op: op,
		query:         url.Values{"user": {parent}},
		decryptAnswer: true,
	})
	if err != nil {
		return nil, err
	}
	var resp struct {
		Accounts []struct {
			AccessKey string `json:"accessKey"`
		} `json:"accounts"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, fmt.Errorf("minio admin %s: decode answer: %w", op, err)
	}
	keys := make([]string, 0, len(resp.Accounts))
	for _, a := range resp.Accounts {
		keys = append(keys, a.AccessKey)
	}
	return keys, nil
}

// DeleteServiceAccount deletes the service account accessKey; it stops
// working at once. A missing one is ErrNoSuchServiceAccount.
func (c *Client) DeleteServiceAccount(ctx context.Context, accessKey string) error {
	if accessKey == "" {
		return errors.New("minio admin delete-service-account: access key is required")
	}
	_, err := c.do(ctx, call{
		method: http.MethodDelete, op: "delete-service-account",
		query: url.Values{"accessKey": {accessKey}},
	})
	return err
}
