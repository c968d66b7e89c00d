package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Delivery is the envelope the handler puts in the inbox queue for each
// accepted delivery: GitHub's delivery id and event name, when bullpen
// received it, and the payload as GitHub sent (and signed) it, byte for byte
// except for whitespace around the JSON value, which JSON cannot keep.
type Delivery struct {
	ID         string          `json:"id"`    // X-GitHub-Delivery
	Event      string          `json:"event"` // X-GitHub-Event
	ReceivedAt time.Time       `json:"received_at"`
	Payload    json.RawMessage `json:"payload"`
}

// ErrInvalidDelivery: an inbox message is not a Delivery envelope.
var ErrInvalidDelivery = errors.New("invalid delivery envelope")

// encodeDelivery renders d, whose payload is JSON, for the inbox. Unlike
// json.Marshal, which compacts a RawMessage and escapes HTML characters, it
// keeps the payload byte for byte, so what the consumer reads is what GitHub
// signed. Whitespace around the payload is dropped.
func encodeDelivery(d Delivery) []byte {
	d.Payload = trimJSONSpace(d.Payload)
	var b bytes.Buffer
	b.Grow(len(d.Payload) + len(d.ID) + len(d.Event) + 96)
	b.WriteString(`{"id":`)
	b.Write(quote(d.ID))
	b.WriteString(`,"event":`)
	b.Write(quote(d.Event))
	b.WriteString(`,"received_at":`)
	b.WriteString(strconv.Quote(d.ReceivedAt.UTC().Format(time.RFC3339Nano)))
	b.WriteString(`,"payload":`)
	b.Write(d.Payload)
	b.WriteString("}")
	return b.Bytes()
}

// quote renders s as a JSON string. Marshalling a string cannot fail.
func quote(s string) []byte {
	q, _ := json.Marshal(s)
	return q
}

// DecodeDelivery reads an inbox message body back into a Delivery. The
// payload is the bytes that were received, less surrounding whitespace.
func DecodeDelivery(body []byte) (Delivery, error) {
	var d Delivery
	if err := json.Unmarshal(body, &d); err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", ErrInvalidDelivery, err)
	}
	switch {
	case d.ID == "":
		return Delivery{}, fmt.Errorf("%w: id is missing", ErrInvalidDelivery)
	case d.Event == "":
		return Delivery{}, fmt.Errorf("%w: event is missing", ErrInvalidDelivery)
	case len(d.Payload) == 0 || string(d.Payload) == "null":
		return Delivery{}, fmt.Errorf("%w: payload is missing", ErrInvalidDelivery)
	}
	return d, nil
}

// trimJSONSpace drops the whitespace JSON allows around a value: a decoder
// never returns it as part of a RawMessage.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
