package awsconf

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// HTTPClient wraps an HTTP client so that an AWS call's answer is never lost
// to a race between the SDK and net/http, which made a call that had
// taken effect be retried (an SQS batch sent twice, seen under load on
// the emulator). net/http, once it has written a request's body, reads
// it once more to check that nothing is left. The SDK closes the body as
// soon as the response's headers arrive, and its closed body answers
// that last read, when made through WriteTo, with io.EOF as an error.
// net/http then counts the request as not written and closes the
// connection under the response being read, and the SDK retries the
// call. A body read only through Read ends cleanly after the close.
// Load wraps the SDK's default client; a configuration built by hand (an
// emulator's) should wrap its own.
func HTTPClient(c aws.HTTPClient) aws.HTTPClient { return wholeBodies{c} }

type wholeBodies struct{ aws.HTTPClient }

func (w wholeBodies) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = readOnly{r.Body}
	}
	return w.HTTPClient.Do(r)
}

// readOnly hides every method of its body but Read and Close.
type readOnly struct{ io.ReadCloser }
