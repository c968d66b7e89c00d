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
		vals, err := imdsGet(ctx, hc, base, "meta-data/instance-id")
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(vals[0]), nil
	case "digitalocean":
		id, err := metadataGet(ctx, hc, http.MethodGet, base+"/metadata/v1/id", nil)
		return strings.TrimSpace(id), err
	}
	return "", fmt.Errorf("unknown metadata source %q (want imds or digitalocean)", source)
}

// IdentityFromIMDS reads EC2's instance identity document and its base64
// RSA-SHA256 signature: the control plane checks them before it gives the
// machine its token. The document is returned byte for byte as EC2 serves
// it, white space included: the signature is over those bytes.
func IdentityFromIMDS(ctx context.Context, hc *http.Client, base string) (doc, signature string, err error) {
	vals, err := imdsGet(ctx, hc, strings.TrimRight(base, "/"),
		"dynamic/instance-identity/document", "dynamic/instance-identity/signature")
	if err != nil {
		return "", "", err
	}
	return vals[0], strings.TrimSpace(vals[1]), nil
}

// imdsGet reads paths under /latest/ with one IMDSv2 session token, each
// answer as it was sent.
func imdsGet(ctx context.Context, hc *http.Client, base string, paths ...string) ([]string, error) {
	token, err := metadataGet(ctx, hc, http.MethodPut, base+"/latest/api/token",
		map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "300"})
	if err != nil {
		return nil, fmt.Errorf("IMDSv2 token: %w", err)
	}
	token = strings.TrimSpace(token)
	out := make([]string, len(paths))
	for i, p := range paths {
		if out[i], err = metadataGet(ctx, hc, http.MethodGet, base+"/latest/"+p,
			map[string]string{"X-aws-ec2-metadata-token": token}); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return out, nil
}

// metadataGet returns the body of the answer as it was sent; a body of
// nothing but white space is an error.
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
		// Metadata trouble is worth retrying like the control plane's, and
		// says nothing of the agent's own credentials: a 401 is the
		// metadata service's session token, not the control plane refusing
		// the agent (exit 3, never restarted).
		return "", &APIError{Status: resp.StatusCode, Message: "metadata service: " + http.StatusText(resp.StatusCode), Foreign: true}
	}
	if strings.TrimSpace(string(body)) == "" {
		return "", fmt.Errorf("%s answered nothing", url)
	}
	return string(body), nil
}
