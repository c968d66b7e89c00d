package provision

import (
	"context"
	"sync"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// images resolves image names for one served batch: each name once, so
// that every fleet of the batch launches the same image, and afresh for the
// next batch, so that cold starts move to a newly published image as pools
// do. Only ids are kept: a failed look-up is tried again by the next fleet.
type images struct {
	cloud domain.Cloud

	mu     sync.Mutex
	byName map[string]*resolution
}

// resolution is one name's id; its lock makes concurrent fleets of the
// batch wait for one look-up instead of each making their own.
type resolution struct {
	mu sync.Mutex
	id string
}

func newImages(cloud domain.Cloud) *images {
	return &images{cloud: cloud, byName: map[string]*resolution{}}
}

func (im *images) resolve(ctx context.Context, name string) (string, error) {
	im.mu.Lock()
	r, ok := im.byName[name]
	if !ok {
		r = &resolution{}
		im.byName[name] = r
	}
	im.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != "" {
		return r.id, nil
	}
	id, err := im.cloud.ResolveImage(ctx, name)
	if err != nil {
		return "", err
	}
	r.id = id
	return id, nil
}
