package webhook

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// Limits on what a body may cost before its signature is known.
const (
	// MaxBody is the largest body accepted: GitHub caps payloads at 25 MB.
	// A body up to this size is read and hashed whole, but only its first
	// bytes (keepFor) are kept in memory.
	MaxBody = 25 << 20
	// MaxPayload is the most of a body kept in memory, for the events whose
	// payload bullpen reads: a workflow_job payload is a few KB, a few
	// hundred with its steps. A signed workflow_job body over this is
	// refused 413.
	MaxPayload = 1 << 20
	// DefaultReaders is how many bodies are read at once by default: each
	// keeps at most MaxPayload, so unauthenticated senders together hold at
	// most DefaultReaders×MaxPayload (32 MiB) however many they are.
	DefaultReaders = 32
	// DefaultReaderWait is how long a request waits for a read slot before
	// it is answered 503: GitHub gives up on a delivery after 10 s, which
	// must also cover the read and the inbox write.
	DefaultReaderWait = 2 * time.Second
	// initialBuffer is what a kept prefix starts at, whatever the
	// Content-Length claims, so a slow sender cannot reserve MaxPayload.
	initialBuffer = 64 << 10
)

// Options bound the cost of the requests being read.
type Options struct {
	// Readers is how many request bodies are read at once (DefaultReaders
	// when zero). The others wait for a slot.
	Readers int
	// ReaderWait is how long a request waits for a slot before it is
	// answered 503 with Retry-After (DefaultReaderWait when zero).
	ReaderWait time.Duration
	// OnPush, when set, is told of every signed push delivery; it must not
	// block (the delivery's answer waits for it).
	OnPush func(Push)
}

func (o Options) withDefaults() Options {
	if o.Readers <= 0 {
		o.Readers = DefaultReaders
	}
	if o.ReaderWait <= 0 {
		o.ReaderWait = DefaultReaderWait
	}
	return o
}

// keepFor is how much of a body of event is kept in memory: only payloads
// the handler parses are kept, and a push cut at MaxPayload is not parsed
// (body.complete).
func keepFor(event string) int {
	if event == EventWorkflowJob || event == EventPush {
		return MaxPayload
	}
	return 0
}

// body is what was read of a request's body: its first bytes and its size.
type body struct {
	kept []byte
	size int64
}

// complete reports whether kept holds the whole body.
func (b body) complete() bool { return int64(len(b.kept)) == b.size }

// errTooLarge: the body is over MaxBody; it was not read to its end.
var errTooLarge = errors.New("body too large")

// readBody reads r to its end, writing every byte to mac and keeping the
// first keep of them. It stops after MaxBody+1 bytes, so an oversized body
// costs no more than that to read, and only keep bytes of memory.
func readBody(r io.Reader, contentLength int64, mac io.Writer, keep int) (body, error) {
	src := io.TeeReader(io.LimitReader(r, MaxBody+1), mac)
	kept, err := readPrefix(src, contentLength, keep)
	if err != nil {
		return body{}, err
	}
	// io.Discard reads through a pooled buffer: the rest costs no memory.
	rest, err := io.Copy(io.Discard, src)
	if err != nil {
		return body{}, err
	}
	b := body{kept: kept, size: int64(len(kept)) + rest}
	if b.size > MaxBody {
		return body{}, errTooLarge
	}
	return b, nil
}

// readPrefix reads up to keep bytes of r into a buffer that starts small
// and doubles, so what it holds grows with what was sent, never with what
// was announced.
func readPrefix(r io.Reader, contentLength int64, keep int) ([]byte, error) {
	if keep <= 0 {
		return nil, nil
	}
	start := initialBuffer
	if contentLength >= 0 && contentLength < initialBuffer {
		start = int(contentLength) + 1 // room to see the end without growing
	}
	buf := make([]byte, 0, min(start, keep))
	for len(buf) < keep {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), keep-len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), keep)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// acquire takes a read slot, waiting at most the configured wait on the
// handler's clock, or until ctx ends. It reports whether it got one; the
// caller then calls release.
func (h *Handler) acquire(ctx context.Context) bool {
	select {
	case h.slots <- struct{}{}:
		return true
	default:
	}
	expired, stop := clock.Closes(h.clock, h.opts.ReaderWait)
	defer stop()
	select {
	case h.slots <- struct{}{}:
		return true
	case <-expired:
		return false
	case <-ctx.Done():
		return false
	}
}

func (h *Handler) release() { <-h.slots }
