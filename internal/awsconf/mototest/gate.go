package mototest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

// Fault is how AWS answers a call it refuses: an HTTP status and an error
// code in the JSON protocol DynamoDB and SQS both speak.
type Fault struct {
	Status  int
	Code    string
	Message string
}

// Faults AWS answers with, as the services document them.
var (
	Throttled      = Fault{http.StatusBadRequest, "ThrottlingException", "Rate of requests exceeds the allowed throughput."}
	BadCredentials = Fault{http.StatusBadRequest, "UnrecognizedClientException", "The security token included in the request is invalid."}
	Denied         = Fault{http.StatusBadRequest, "AccessDeniedException", "User is not authorized to perform this action"}
	Unavailable    = Fault{http.StatusServiceUnavailable, "ServiceUnavailable", "Service is unavailable."}
)

// Refusal is a fault with what a client's error must then say: its kind
// (nil where retrying is all there is to do) and words of its hint.
type Refusal struct {
	Fault
	Kind error
	Says string
}

// Refusals are the faults an adapter's tests inject, one of each kind.
var Refusals = []Refusal{
	{Unavailable, nil, "503"},
	{Throttled, awsconf.ErrThrottled, "request quotas"},
	{BadCredentials, awsconf.ErrCredentials, "instance role"},
	{Denied, awsconf.ErrDenied, "bullpen aws iam-policy"},
}

// Gate sits between clients and the emulator and, while a fault is set,
// answers every call with it instead of passing it on. Point a client's
// endpoint at URL.
type Gate struct {
	URL     string
	fault   atomic.Pointer[Fault]
	refused atomic.Int64
	lose    atomic.Int64
}

// NewGate starts a gate in front of the package's emulator.
func NewGate(t testing.TB) *Gate {
	t.Helper()
	target, err := url.Parse(Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := g.fault.Load()
		if g.lose.Add(-1) >= 0 {
			// The emulator handles the call; its answer is lost on the way.
			proxy.ServeHTTP(discard{}, r)
			f = &Fault{http.StatusInternalServerError, "InternalServerError", "the answer was lost"}
		}
		if f == nil {
			proxy.ServeHTTP(w, r)
			return
		}
		g.refused.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amzn-ErrorType", f.Code)
		w.WriteHeader(f.Status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": f.Code, "message": f.Message})
	}))
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// Fail answers every call with f from now on.
func (g *Gate) Fail(f Fault) { g.fault.Store(&f) }

// LoseAnswers lets the next n calls through to the emulator but answers
// them with a 500, as when a connection drops after the request was
// handled; the SDK then tries again.
func (g *Gate) LoseAnswers(n int) { g.lose.Store(int64(n)) }

// discard is a response writer that drops what it is given.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// Pass lets calls through to the emulator again.
func (g *Gate) Pass() { g.fault.Store(nil) }

// Refused is how many calls the gate has answered with a fault.
func (g *Gate) Refused() int64 { return g.refused.Load() }
