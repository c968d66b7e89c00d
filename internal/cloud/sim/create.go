package sim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Create launches spec.Count machines like an EC2 instant fleet. Each starts
// pending, runs after Latency.Boot and sends its warm signal Latency.WarmUp
// later. When Capacity leaves room for fewer machines, it launches those
// that fit and returns them with an error wrapping
// domain.ErrInsufficientCapacity.
//
// A call repeating a non-empty ClientToken that launched machines returns
// those machines (as they are now) and the original error, launching
// nothing; the same token with a different request is refused
// (IdempotentParameterMismatch). A token whose call launched nothing is not
// remembered, so a retry may succeed once capacity frees up.
func (c *Cloud) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	// As in the EC2 provider, the type is chosen before the fleet is
	// asked for: a runner no type fits makes no call.
	itype, err := InstanceType(spec.Runner)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now, err := c.call(ctx, OpCreateFleet, spec.Count)
	if err != nil {
		return nil, err
	}
	usage := UsageClass(spec.Runner)
	fp := ec2like.Fingerprint(spec, itype, usage)
	done, err := c.tokens.Recall(spec.ClientToken, fp)
	if err != nil {
		return nil, err
	}
	if done != nil {
		return ec2like.Views(c.machines, done.IDs, c.viewAt(now)), done.Err
	}
	if err := c.validateLaunch(spec); err != nil {
		return nil, err
	}
	n := ec2like.Fit(spec.Count, c.capacity, c.live(now))
	out := make([]domain.CloudInstance, 0, n)
	ids := make([]string, 0, n)
	for range n {
		m := c.launch(spec, itype, usage, now)
		out = append(out, m.view(now))
		ids = append(ids, m.inst.ID)
	}
	if n < spec.Count {
		err = ec2like.Errorf(OpCreateFleet, CodeInsufficient, domain.ErrInsufficientCapacity,
			"launched %d of %d %s machines", n, spec.Count, itype)
	}
	c.tokens.Remember(spec.ClientToken, fp, ids, err)
	if n == 0 {
		return nil, err
	}
	return out, err
}

func (c *Cloud) validateLaunch(spec domain.LaunchSpec) error {
	if err := ec2like.CheckLaunch(spec, c.opts.MaxPerCall); err != nil {
		return err
	}
	// Without Options.Images every id is accepted, so that tests need not
	// resolve an image first.
	if c.images != nil && !c.imageIDs[spec.ImageID] {
		return ec2like.Errorf(OpCreateFleet, CodeAMINotFound, domain.ErrUnknownImage,
			"image %s does not exist", spec.ImageID)
	}
	return nil
}

// launch adds one pending machine and starts its agent. Called under c.mu.
func (c *Cloud) launch(spec domain.LaunchSpec, itype, usage string, now time.Time) *machine {
	c.seq++
	m := &machine{
		seq: c.seq,
		inst: domain.CloudInstance{
			ID:           c.newID(),
			Tags:         ec2like.CloneTags(spec.Tags),
			InstanceType: itype,
			UsageClass:   usage,
			LaunchedAt:   now,
		},
		neverWarm: c.opts.NeverWarmEvery > 0 && c.seq%c.opts.NeverWarmEvery == 0,
	}
	m.begin(now, domain.CloudPending, domain.CloudRunning, c.opts.latency(itype).Boot)
	c.machines[m.inst.ID] = m
	c.startRun(m, now, now.Add(c.opts.latency(itype).Boot))
	return m
}

// newID derives an EC2-shaped id from the seed and the machine's sequence
// number, so that runs are reproducible.
func (c *Cloud) newID() string {
	var buf [24]byte
	binary.BigEndian.PutUint64(buf[0:], c.opts.Seed)
	binary.BigEndian.PutUint64(buf[8:], uint64(c.seq))
	for salt := uint64(0); ; salt++ {
		binary.BigEndian.PutUint64(buf[16:], salt)
		sum := sha256.Sum256(buf[:])
		id := "i-" + hex.EncodeToString(sum[:])[:17]
		if _, taken := c.machines[id]; !taken {
			return id
		}
	}
}

// ResolveImage returns the id of the image called name: from Options.Images
// when set, otherwise "ami-" and a hash of the name and its generation (see
// PublishImage). An empty or unconfigured name is domain.ErrUnknownImage.
// A simulated machine boots any image: r does not choose.
func (c *Cloud) ResolveImage(ctx context.Context, name string, _ domain.RunnerSpec) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ec2like.DescribeImage(ctx, c.call, name); err != nil {
		return "", err
	}
	if c.images == nil {
		return imageID(name, c.imageGen[name]), nil
	}
	id, ok := c.images[name]
	if !ok {
		return "", ec2like.Errorf(OpDescribeImages, CodeAMINotFound, domain.ErrUnknownImage,
			"no image called %q", name)
	}
	return id, nil
}

// PublishImage simulates the release of a new version of the image called
// name: from now on it resolves to a new id, which it returns. With
// Options.Images set, the name is added if it was missing. Not an API call.
func (c *Cloud) PublishImage(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.imageGen[name]++
	id := imageID(name, c.imageGen[name])
	if c.images != nil {
		c.images[name] = id
		c.imageIDs[id] = true
	}
	return id
}

func imageID(name string, generation int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", name, generation))
	return "ami-" + hex.EncodeToString(sum[:])[:17]
}

// UsageClass is "spot" when r asks for spot capacity, else "on-demand".
func UsageClass(r domain.RunnerSpec) string {
	if r.Spot != "" {
		return "spot"
	}
	return "on-demand"
}
