package ec2like

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// CheckLaunch refuses a CreateFleet request EC2 would refuse whatever the
// provider: a count outside 1 to max, or no image id.
func CheckLaunch(spec domain.LaunchSpec, max int) error {
	if spec.Count < 1 || spec.Count > max {
		return Errorf(OpCreateFleet, CodeInvalidParameter, domain.ErrInvalidRequest,
			"count %d, want 1 to %d", spec.Count, max)
	}
	if spec.ImageID == "" {
		return Errorf(OpCreateFleet, CodeAMIMalformed, domain.ErrUnknownImage, "no image id given")
	}
	return nil
}

// RequireImageName refuses a DescribeImages call without a name: no image
// has an empty one.
func RequireImageName(name string) error {
	if name == "" {
		return Errorf(OpDescribeImages, CodeAMINotFound, domain.ErrUnknownImage, "no image name given")
	}
	return nil
}

// Fit is how many of want machines a cap of capacity live machines leaves
// room for when live are already live; a zero capacity is no cap.
func Fit(want, capacity, live int) int {
	if capacity <= 0 {
		return want
	}
	return min(want, max(0, capacity-live))
}

// Fingerprint identifies a CreateFleet request for ClientToken checks: the
// count, image, tags and launch id of spec, and whatever else the provider
// derives from the request (extra, in a fixed order).
func Fingerprint(spec domain.LaunchSpec, extra ...string) string {
	b, err := json.Marshal(struct {
		Count  int
		Image  string
		Tags   map[string]string
		Launch string
		Extra  []string
	}{spec.Count, spec.ImageID, spec.Tags, spec.Agent.LaunchID, extra})
	if err != nil {
		panic("fingerprint: " + err.Error()) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Launch is what a CreateFleet call that launched machines leaves for its
// ClientToken: the machines, and the error it returned with them.
type Launch struct {
	IDs []string
	Err error
}

// Ledger remembers CreateFleet calls by ClientToken, so that a retried call
// launches nothing twice. The zero value is ready to use.
type Ledger struct {
	launches map[string]ledgerEntry
}

type ledgerEntry struct {
	fingerprint string
	launch      Launch
}

// Recall returns the launch a call with token made, or nil when there was
// none (an empty token is never remembered). The token used for a request
// with another fingerprint is refused: IdempotentParameterMismatch.
func (l *Ledger) Recall(token, fingerprint string) (*Launch, error) {
	e, ok := l.launches[token]
	if !ok || token == "" {
		return nil, nil
	}
	if e.fingerprint != fingerprint {
		return nil, Errorf(OpCreateFleet, CodeIdempotentMismatch, domain.ErrInvalidRequest,
			"client token %q was used with a different request", token)
	}
	return &e.launch, nil
}

// Remember records the machines a call with token launched and the error
// it returned. A call that launched nothing is not remembered, so that a
// retry may succeed once capacity frees up; nor is one without a token.
func (l *Ledger) Remember(token, fingerprint string, ids []string, err error) {
	if token == "" || len(ids) == 0 {
		return
	}
	if l.launches == nil {
		l.launches = map[string]ledgerEntry{}
	}
	l.launches[token] = ledgerEntry{fingerprint: fingerprint, launch: Launch{IDs: ids, Err: err}}
}
