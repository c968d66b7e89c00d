package provision

import (
	"context"
	"sync"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// images resolves image names for one served batch: each runner's name
// once (a name may give runners of different architectures different
// images), so that every fleet of the batch launches the same image, and afresh for the
// next batch, so that cold starts move to a newly published image as pools
// do. Only ids are kept: a failed look-up is tried again by the next fleet.
type images struct {
	cloud domain.Cloud

	mu     sync.Mutex
	byName map[string]*resolution // by runner and image name
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

func (im *images) resolve(ctx context.Context, spec domain.RunnerSpec) (string, error) {
	key := spec.Name + "\x00" + spec.Image
	im.mu.Lock()
	r, ok := im.byName[key]
	if !ok {
		r = &resolution{}
		im.byName[key] = r
	}
	im.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != "" {
		return r.id, nil
	}
	id, err := im.cloud.ResolveImage(ctx, spec.Image, spec)
	if err != nil {
		return "", err
	}
	r.id = id
	return id, nil
}
