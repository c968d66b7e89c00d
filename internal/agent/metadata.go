package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// CloudIDFromMetadata asks the machine's metadata service for its cloud id:
// source "imds" is EC2's (IMDSv2: a session token first), "digitalocean"
// the droplet metadata service. base is the service's base URL.
func CloudIDFromMetadata(ctx context.Context, hc *http.Client, base, source string) (string, error) {
	base = strings.TrimRight(base, "/")
	switch source {
	case "imds":
		token, err := metadataGet(ctx, hc, http.MethodPut, base+"/latest/api/token",
			map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "300"})
		if err != nil {
			return "", fmt.Errorf("IMDSv2 token: %w", err)
		}
		return metadataGet(ctx, hc, http.MethodGet, base+"/latest/meta-data/instance-id",
			map[string]string{"X-aws-ec2-metadata-token": token})
	case "digitalocean":
		return metadataGet(ctx, hc, http.MethodGet, base+"/metadata/v1/id", nil)
	}
	return "", fmt.Errorf("unknown metadata source %q (want imds or digitalocean)", source)
}

func metadataGet(ctx context.Context, hc *http.Client, method, url string, header map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return "", err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		// Metadata trouble is worth retrying like the control plane's.
		return "", &APIError{Status: resp.StatusCode, Message: "metadata service: " + http.StatusText(resp.StatusCode)}
	}
	v := strings.TrimSpace(string(body))
	if v == "" {
		return "", fmt.Errorf("%s answered nothing", url)
	}
	return v, nil
}
