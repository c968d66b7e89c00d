package ec2

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// image is a resolved AMI, with what a launch needs of it.
type image struct {
	id           string
	rootDevice   string // where the runner's volume goes
	architecture string // which instance types can boot it
}

// cachedImages are the images a name stood for when last looked up.
type cachedImages struct {
	images []image // newest first
	at     time.Time
}

// ResolveImage turns the configuration's image into an AMI id: an AMI id is
// checked and kept; anything else is a name, or a name pattern (with * and
// ?), looked up among the images of the configured owners ("OWNER/NAME"
// asks one owner), the newest by creation date winning. A pattern that
// matches images of several architectures (Ubuntu's names differ only in
// amd64 and arm64) gives the newest that r's instance types can boot.
// Answers are cached for ImageTTL.
func (c *Cloud) ResolveImage(ctx context.Context, name string, r domain.RunnerSpec) (string, error) {
	img, err := c.image(ctx, name, r)
	return img.id, err
}

func (c *Cloud) image(ctx context.Context, name string, r domain.RunnerSpec) (image, error) {
	found, err := c.images(ctx, name)
	if err != nil {
		return image{}, err
	}
	if !severalArchitectures(found) {
		return found[0], nil
	}
	var archs []string
	for _, img := range found {
		if _, err := c.InstanceTypes(ctx, r, img.architecture); err == nil {
			return img, nil
		} else if !errors.Is(err, domain.ErrInvalidRequest) {
			return image{}, err
		}
		if !slices.Contains(archs, img.architecture) {
			archs = append(archs, img.architecture)
		}
	}
	return image{}, &domain.CloudError{Op: ec2like.OpDescribeImages, Code: "InvalidParameterCombination",
		Err: fmt.Errorf("%w: the images %q are for %s; runner %s has no instance type of those architectures",
			domain.ErrInvalidRequest, name, strings.Join(slices.Sorted(slices.Values(archs)), ", "), r.Name)}
}

func severalArchitectures(imgs []image) bool {
	for _, img := range imgs[1:] {
		if img.architecture != imgs[0].architecture {
			return true
		}
	}
	return false
}

// images returns the available images a name stands for, newest first.
func (c *Cloud) images(ctx context.Context, name string) ([]image, error) {
	if name == "" {
		return nil, &domain.CloudError{Op: ec2like.OpDescribeImages, Code: "InvalidAMIName.NotFound",
			Err: fmt.Errorf("%w: no image name", domain.ErrUnknownImage)}
	}
	now := c.opts.Clock.Now()
	c.mu.Lock()
	cached, ok := c.imageCache[name]
	c.mu.Unlock()
	if ok && now.Sub(cached.at) < c.opts.ImageTTL {
		return cached.images, nil
	}
	found, err := c.lookupImages(ctx, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.imageCache[name] = cachedImages{images: found, at: now}
	c.mu.Unlock()
	return found, nil
}

func (c *Cloud) lookupImages(ctx context.Context, name string) ([]image, error) {
	in := &ec2.DescribeImagesInput{}
	switch owner, pattern, hasOwner := strings.Cut(name, "/"); {
	case strings.HasPrefix(name, "ami-"):
		in.ImageIds = []string{name}
	case hasOwner:
		in.Owners = []string{owner}
		in.Filters = imageFilters(pattern)
	default:
		in.Owners = c.opts.ImageOwners
		in.Filters = imageFilters(name)
	}
	out, err := c.api.DescribeImages(ctx, in)
	if err != nil {
		return nil, mapError(ec2like.OpDescribeImages, err)
	}
	imgs := slices.Clone(out.Images)
	// RFC 3339 in UTC: the text orders as the time.
	slices.SortStableFunc(imgs, func(a, b types.Image) int { return strings.Compare(deref(b.CreationDate), deref(a.CreationDate)) })
	found := make([]image, 0, len(imgs))
	for _, img := range imgs {
		found = append(found, image{id: deref(img.ImageId), rootDevice: deref(img.RootDeviceName), architecture: string(img.Architecture)})
	}
	if len(found) == 0 {
		return nil, &domain.CloudError{Op: ec2like.OpDescribeImages, Code: "InvalidAMIName.NotFound",
			Err: fmt.Errorf("%w: no available image %q owned by %v", domain.ErrUnknownImage, name, ownersOf(in))}
	}
	return found, nil
}

func imageFilters(pattern string) []types.Filter {
	return []types.Filter{
		{Name: aws.String("name"), Values: []string{pattern}},
		{Name: aws.String("state"), Values: []string{"available"}},
	}
}

func ownersOf(in *ec2.DescribeImagesInput) []string {
	if len(in.Owners) == 0 {
		return []string{"any"}
	}
	return in.Owners
}
