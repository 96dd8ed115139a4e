package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// bucketQuotaWire is a bucket's quota as the server keeps it: a hard limit
// on the bucket's size in bytes. MinIO has no limit on the number of
// objects.
type bucketQuotaWire struct {
	Size uint64 `json:"size"`
	Type string `json:"quotatype,omitempty"`
}

// SetBucketQuota limits the bucket to size bytes (a hard quota), or, with
// size 0, removes its limit. A write is refused when the object alone
// reaches the limit, or when it and the bucket's usage do; the server
// counts usage in a periodic background scan, so writes shortly after
// others may pass the limit until the next scan. A missing bucket is an
// *Error with code NoSuchBucket.
func (c *Client) SetBucketQuota(ctx context.Context, bucket string, size uint64) error {
	if bucket == "" {
		return errors.New("minio admin set-bucket-quota: bucket is required")
	}
	q := bucketQuotaWire{Size: size}
	if size > 0 {
		q.Type = "hard"
	}
	body, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("minio admin set-bucket-quota: %w", err)
	}
	_, err = c.do(ctx, call{
		method: http.MethodPut, op: "set-bucket-quota",
		query: url.Values{"bucket": {bucket}},
		body:  body,
	})
	return err
}

// BucketQuota returns the bucket's hard size limit in bytes, 0 if it has
// none. A missing bucket is an *Error with code NoSuchBucket.
func (c *Client) BucketQuota(ctx context.Context, bucket string) (uint64, error) {
	if bucket == "" {
		return 0, errors.New("minio admin get-bucket-quota: bucket is required")
	}
	answer, err := c.do(ctx, call{
		method: http.MethodGet, op: "get-bucket-quota",
		query: url.Values{"bucket": {bucket}},
	})
	if err != nil {
		return 0, err
	}
	var q struct {
		bucketQuotaWire
		// Quota is the size limit's older name, which servers still read.
		Quota uint64 `json:"quota"`
	}
	if err := json.Unmarshal(answer, &q); err != nil {
		return 0, fmt.Errorf("minio admin get-bucket-quota: decode answer: %w", err)
	}
	if q.Type != "hard" {
		return 0, nil
	}
	if q.Size > 0 {
		return q.Size, nil
	}
	return q.Quota, nil
}
