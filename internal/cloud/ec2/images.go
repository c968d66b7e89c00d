package ec2

import (
	"context"
	"fmt"
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
	at           time.Time
}

// ResolveImage turns the configuration's image into an AMI id: an AMI id is
// checked and kept; anything else is a name, or a name pattern (with * and
// ?), looked up among the images of the configured owners ("OWNER/NAME"
// asks one owner), the newest by creation date winning. Answers are cached
// for ImageTTL.
func (c *Cloud) ResolveImage(ctx context.Context, name string) (string, error) {
	img, err := c.image(ctx, name)
	return img.id, err
}

func (c *Cloud) image(ctx context.Context, name string) (image, error) {
	if name == "" {
		return image{}, &domain.CloudError{Op: ec2like.OpDescribeImages, Code: "InvalidAMIName.NotFound",
			Err: fmt.Errorf("%w: no image name", domain.ErrUnknownImage)}
	}
	now := c.opts.Clock.Now()
	c.mu.Lock()
	cached, ok := c.images[name]
	c.mu.Unlock()
	if ok && now.Sub(cached.at) < c.opts.ImageTTL {
		return cached, nil
	}
	img, err := c.lookupImage(ctx, name)
	if err != nil {
		return image{}, err
	}
	img.at = now
	c.mu.Lock()
	c.images[name] = img
	c.mu.Unlock()
	return img, nil
}

func (c *Cloud) lookupImage(ctx context.Context, name string) (image, error) {
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
		return image{}, mapError(ec2like.OpDescribeImages, err)
	}
	var best *types.Image
	for i := range out.Images {
		img := &out.Images[i]
		if best == nil || deref(img.CreationDate) > deref(best.CreationDate) {
			best = img // RFC 3339 in UTC: the text orders as the time
		}
	}
	if best == nil {
		return image{}, &domain.CloudError{Op: ec2like.OpDescribeImages, Code: "InvalidAMIName.NotFound",
			Err: fmt.Errorf("%w: no available image %q owned by %v", domain.ErrUnknownImage, name, ownersOf(in))}
	}
	return image{id: deref(best.ImageId), rootDevice: deref(best.RootDeviceName), architecture: string(best.Architecture)}, nil
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
