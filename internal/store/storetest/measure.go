package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// measureChunk is how many rows MeasureCASRate creates or cleans up per call.
const measureChunk = 500

// MeasureCASRate reports how many guarded ready→claimed transitions per
// second s sustains, one after another from a single caller. It creates n
// ready instances under a random id prefix, times only the n transitions on
// the wall clock, then terminates and deletes the rows again.
func MeasureCASRate(ctx context.Context, s domain.Store, n int) (perSecond float64, err error) {
	if n <= 0 {
		return 0, fmt.Errorf("measure CAS rate: n must be positive, got %d", n)
	}
	prefix, err := randomPrefix()
	if err != nil {
		return 0, fmt.Errorf("measure CAS rate: %w", err)
	}
	ids := make([]string, n)
	for k := range ids {
		ids[k] = fmt.Sprintf("%s-%07d", prefix, k)
	}
	if err := createReady(ctx, s, ids); err != nil {
		return 0, fmt.Errorf("measure CAS rate: %w", err)
	}
	defer func() {
		if cerr := cleanUp(ctx, s, ids); cerr != nil {
			err = errors.Join(err, fmt.Errorf("measure CAS rate: clean up: %w", cerr))
		}
	}()

	began := time.Now()
	for k, id := range ids {
		if _, err := s.Transition(ctx, id, readyUnbound, claim(fmt.Sprintf("bench-job-%d", k))); err != nil {
			return 0, fmt.Errorf("measure CAS rate: %w", err)
		}
	}
	elapsed := time.Since(began)
	return float64(n) / elapsed.Seconds(), nil
}

func randomPrefix() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random id prefix: %w", err)
	}
	return "cas-bench-" + hex.EncodeToString(b), nil
}

func createReady(ctx context.Context, s domain.Store, ids []string) error {
	for _, chunk := range domain.Chunk(ids, measureChunk) {
		insts := make([]domain.Instance, len(chunk))
		for k, id := range chunk {
			insts[k] = domain.Instance{ID: id, State: domain.StateReady, Runner: "bench", Role: domain.RoleOnDemand}
		}
		if err := s.CreateInstances(ctx, insts); err != nil {
			return err
		}
	}
	return nil
}

// cleanUp walks every row to terminated, whatever state the measurement left
// it in, and deletes it.
func cleanUp(ctx context.Context, s domain.Store, ids []string) error {
	for _, chunk := range domain.Chunk(ids, measureChunk) {
		for _, target := range []domain.State{domain.StateTerminating, domain.StateTerminated} {
			if err := moveAll(ctx, s, chunk, target); err != nil {
				return err
			}
		}
		if err := s.DeleteInstances(ctx, chunk); err != nil {
			return err
		}
	}
	return nil
}

func moveAll(ctx context.Context, s domain.Store, ids []string, target domain.State) error {
	reqs := make([]domain.TransitionRequest, 0, len(ids))
	for _, id := range ids {
		cur, err := s.GetInstance(ctx, id)
		if errors.Is(err, domain.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if cur.State == target {
			continue
		}
		reqs = append(reqs, domain.TransitionRequest{ID: id, Guard: domain.GuardOf(cur), Apply: to(target)})
	}
	results, err := s.TransitionBatch(ctx, reqs)
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
