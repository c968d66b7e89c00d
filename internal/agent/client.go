package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Errors that end the agent's run.
var (
	// ErrInstanceEnded: the control plane ended the instance (its token
	// expired with it). The agent's work is over.
	ErrInstanceEnded = errors.New("the instance has ended")
	// ErrUnauthorized: the control plane refused the agent's credentials
	// (a wrong bootstrap secret, a token already issued, an unknown token).
	// Retrying cannot help.
	ErrUnauthorized = errors.New("credentials refused")
	// ErrUnreachable: the control plane stayed unreachable past the
	// deadline; the agent ran the shutdown command.
	ErrUnreachable = errors.New("control plane unreachable")
	// ErrStateDirInUse: another agent runs with the same state directory
	// (it holds the directory's lock). Two agents on one machine would
	// both run the runner of the same job.
	ErrStateDirInUse = errors.New("in use by another agent on this machine (it holds the directory's lock)")
)

// APIError is an answer other than success.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	// Foreign: the answer is not the control plane's own (no JSON error
	// with a code): a proxy's or balancer's page standing in for it. It
	// says nothing about the agent's credentials or requests, only that
	// the control plane is out of reach.
	Foreign bool
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("answered %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("control plane answered %d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap maps the answer to the errors callers branch on: a rejection is
// domain.ErrRejected (never retried).
func (e *APIError) Unwrap() error {
	switch {
	case e.Foreign:
		return nil
	case e.Status == http.StatusUnauthorized && e.Code == agentapi.CodeInstanceEnded:
		return ErrInstanceEnded
	case e.Status == http.StatusUnauthorized, e.Code == agentapi.CodeTokenIssued:
		return ErrUnauthorized
	case e.Status == http.StatusConflict:
		return domain.ErrRejected
	}
	return nil
}

// transient reports whether err may go away by itself: the network, an
// answer that says "later", or an answer that is not the control plane's
// (the control plane is out of reach behind whoever gave it).
func transient(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, ErrInstanceEnded) &&
			!errors.Is(err, ErrUnauthorized) && !errors.Is(err, domain.ErrRejected)
	}
	return ae.Foreign || ae.Status >= 500 || ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusRequestTimeout
}

// answeredByControlPlane reports whether err is the control plane's own
// answer, which proves it reachable whatever the answer says.
func answeredByControlPlane(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && !ae.Foreign
}

// client speaks the agent API. The token is set once, before the calls
// that use it start.
type client struct {
	base  string
	http  *http.Client
	token string
}

// Request timeouts on top of any long poll: real time, as networks are.
const callTimeout = 30 * time.Second

func (c *client) do(ctx context.Context, method, path string, in, out any, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err // a *url.Error, naming the call; the URL holds no credential
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, agentapi.MaxBody))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	// The control plane's successes are JSON or nothing (204): a proxy's
	// 200 page is not one, and must not pass for a heartbeat delivered.
	if resp.StatusCode/100 != 2 || (resp.StatusCode != http.StatusNoContent && !answersJSON(resp)) {
		return fmt.Errorf("%s %s: %w", method, path, apiError(resp, data))
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: malformed answer: %w", method, path, err)
	}
	return nil
}

func answersJSON(resp *http.Response) bool {
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mediaType == "application/json"
}

// apiError reads an answer other than success. Only a JSON error with a
// code is the control plane's own; anything else (an HTML 404 or 403 from
// a proxy, a balancer's 502, a captive portal's 200 page) is Foreign.
func apiError(resp *http.Response, data []byte) *APIError {
	e := &APIError{Status: resp.StatusCode}
	var body agentapi.ErrorResponse
	if answersJSON(resp) && json.Unmarshal(data, &body) == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Error
	} else {
		e.Foreign = true
		e.Message = fmt.Sprintf("%s (not the control plane's answer: %q)", http.StatusText(resp.StatusCode), resp.Header.Get("Content-Type"))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

func (c *client) hello(ctx context.Context, req agentapi.HelloRequest) (agentapi.HelloResponse, error) {
	var resp agentapi.HelloResponse
	err := c.do(ctx, http.MethodPost, agentapi.PathHello, req, &resp, callTimeout)
	if err == nil && resp.Token == "" {
		err = errors.New("hello answered without a token")
	}
	return resp, err
}

func (c *client) heartbeat(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, agentapi.PathHeartbeat, nil, nil, callTimeout)
}

func (c *client) next(ctx context.Context, wait time.Duration) (agentapi.Instruction, error) {
	var ins agentapi.Instruction
	path := agentapi.PathNext + "?wait=" + wait.String()
	err := c.do(ctx, http.MethodGet, path, nil, &ins, wait+callTimeout)
	return ins, err
}

func (c *client) signal(ctx context.Context, req agentapi.SignalRequest) error {
	return c.do(ctx, http.MethodPost, agentapi.PathSignal, req, nil, callTimeout)
}
