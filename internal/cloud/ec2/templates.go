package ec2

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// EC2's codes for a launch template that exists already, or no longer.
const (
	codeTemplateExists     = "InvalidLaunchTemplateName.AlreadyExistsException"
	codeTemplateNameAbsent = "InvalidLaunchTemplateName.NotFoundException"
	codeTemplateIDAbsent   = "InvalidLaunchTemplateId.NotFound"
)

// templateRef is one version of a launch template.
type templateRef struct {
	id     string
	number int64
}

// templateVersion makes the launch's own version of its runner's launch
// template (created on first use). A template deleted behind bullpen's
// back (by an operator, or a stack's teardown) is forgotten and made
// again, once per launch, rather than failing the launch as invalid.
func (c *Cloud) templateVersion(ctx context.Context, spec domain.LaunchSpec, img image) (templateRef, error) {
	data, err := c.templateData(spec, img)
	if err != nil {
		return templateRef{}, err
	}
	name := templateName(c.opts.TemplatePrefix, spec.Runner.Name)
	for again := false; ; again = true {
		id, err := c.template(ctx, name)
		if err != nil {
			return templateRef{}, err
		}
		out, err := c.api.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
			LaunchTemplateId: aws.String(id), LaunchTemplateData: data,
			VersionDescription: aws.String("launch " + spec.Agent.LaunchID),
		})
		err = mapError("CreateLaunchTemplateVersion", err)
		if templateGone(err) && !again {
			c.forgetTemplate(id)
			c.opts.Log.Warn("launch template is gone; making it again", "template", name, "id", id)
			continue
		}
		if err != nil {
			return templateRef{}, err
		}
		if out.LaunchTemplateVersion == nil {
			return templateRef{}, fmt.Errorf("CreateLaunchTemplateVersion: no version in the answer")
		}
		return templateRef{id: id, number: deref(out.LaunchTemplateVersion.VersionNumber)}, nil
	}
}

// templateGone says whether err is EC2's answer about a launch template
// that does not exist.
func templateGone(err error) bool {
	return isCode(err, codeTemplateIDAbsent) || isCode(err, codeTemplateNameAbsent)
}

// forgetTemplate drops a template id from the cache, so that the next
// launch of its runner finds or makes the template anew.
func (c *Cloud) forgetTemplate(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, known := range c.templates {
		if known == id {
			delete(c.templates, name)
		}
	}
}

// template returns the id of the launch template called name, finding or
// creating it once per name at a time in the process: the converger's
// pools and the provisioner launch the same runner concurrently, and the
// loser of a describe-then-create race would be refused as invalid.
func (c *Cloud) template(ctx context.Context, name string) (string, error) {
	for {
		c.mu.Lock()
		if id, ok := c.templates[name]; ok {
			c.mu.Unlock()
			return id, nil
		}
		busy, ok := c.makingTemplate[name]
		if !ok {
			done := make(chan struct{})
			c.makingTemplate[name] = done
			c.mu.Unlock()
			id, err := c.findOrCreateTemplate(ctx, name)
			c.mu.Lock()
			if err == nil {
				c.templates[name] = id
			}
			delete(c.makingTemplate, name)
			close(done)
			c.mu.Unlock()
			return id, err
		}
		c.mu.Unlock()
		select {
		case <-busy: // made, or failed: look again, and try in turn if it failed
		case <-ctx.Done():
			return "", fmt.Errorf("launch template %s: %w", name, ctx.Err())
		}
	}
}

// findOrCreateTemplate returns the id of the template called name, creating
// it (with a first version that launches nothing by itself) when it does
// not exist. Another replica may create it between the describe and the
// create: then it is described again and used.
func (c *Cloud) findOrCreateTemplate(ctx context.Context, name string) (string, error) {
	if id, err := c.findTemplate(ctx, name); err != nil || id != "" {
		return id, err
	}
	created, err := c.api.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String(name),
		LaunchTemplateData: &types.RequestLaunchTemplateData{
			InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
			MetadataOptions:                   metadataOptions(),
		},
		VersionDescription: aws.String("bullpen: each launch adds its own version"),
		TagSpecifications:  c.templateTags(),
	})
	if err == nil {
		id := deref(created.LaunchTemplate.LaunchTemplateId)
		c.opts.Log.Info("launch template created", "template", name, "id", id)
		return id, nil
	}
	if err = mapError("CreateLaunchTemplate", err); !isCode(err, codeTemplateExists) {
		return "", err
	}
	id, err := c.findTemplate(ctx, name)
	if err == nil && id == "" {
		// Not an invalid request: EC2's reads lag its writes, and the
		// launch is retried.
		return "", fmt.Errorf("launch template %s: created by another, not described yet", name)
	}
	if err != nil {
		return "", err
	}
	c.opts.Log.Info("launch template created by another process; using it", "template", name, "id", id)
	return id, nil
}

// findTemplate returns the id of the template called name, "" when there
// is none.
func (c *Cloud) findTemplate(ctx context.Context, name string) (string, error) {
	found, err := c.api.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{name}})
	switch {
	case err == nil && len(found.LaunchTemplates) > 0:
		return deref(found.LaunchTemplates[0].LaunchTemplateId), nil
	case err == nil || isCode(err, codeTemplateNameAbsent):
		return "", nil
	}
	return "", mapError("DescribeLaunchTemplates", err)
}

// maxVersionsPerDelete is the most versions one DeleteLaunchTemplateVersions
// call takes.
const maxVersionsPerDelete = 200

// dropVersion deletes a launch's template version once its fleet request
// is made: the machines keep their user data, and the template keeps no
// more than its first version between launches. It is tried once, not
// retried within the launch, which is done: a version whose delete fails
// is kept in mind and deleted with the template's next launch version, so
// that a passing failure does not leave it for good, and a template never
// nears EC2's 10,000 versions. At most maxVersionsPerDelete-1 are kept per
// template, so that one call takes them all with the new one; beyond that
// the oldest are left behind, and named in the log.
func (c *Cloud) dropVersion(ctx context.Context, v templateRef) {
	c.mu.Lock()
	numbers := append(slices.Clone(c.undeletedVersions[v.id]), v.number)
	delete(c.undeletedVersions, v.id)
	c.mu.Unlock()
	versions := make([]string, len(numbers))
	for i, n := range numbers {
		versions[i] = strconv.FormatInt(n, 10)
	}
	out, err := c.api.DeleteLaunchTemplateVersions(context.WithoutCancel(ctx), &ec2.DeleteLaunchTemplateVersionsInput{
		LaunchTemplateId: aws.String(v.id), Versions: versions},
		func(o *ec2.Options) { o.RetryMaxAttempts = 1 })
	err = mapError("DeleteLaunchTemplateVersions", err)
	var failed []int64
	switch {
	case templateGone(err):
		return // its versions went with it
	case err != nil:
		failed = numbers
	default:
		failed = undeleted(out)
	}
	if len(failed) == 0 {
		return
	}
	c.mu.Lock()
	kept := append(failed, c.undeletedVersions[v.id]...) // a launch that ran meanwhile kept its own
	var dropped []int64
	if over := len(kept) - (maxVersionsPerDelete - 1); over > 0 {
		dropped, kept = kept[:over], kept[over:]
	}
	c.undeletedVersions[v.id] = kept
	first := !c.warnedVersions[v.id]
	c.warnedVersions[v.id] = true
	c.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn // once per template: an emulator may not support it at all
	}
	if err == nil {
		err = fmt.Errorf("%d of %d versions not deleted", len(failed), len(numbers))
	}
	attrs := []any{"template", v.id, "versions", failed, "err", err}
	if len(dropped) > 0 {
		attrs = append(attrs, "left_behind", dropped) // too many failed deletes to keep them all
	}
	c.opts.Log.Log(ctx, level, "delete launch template versions; the next launch tries again", attrs...)
}

// undeleted returns the versions a delete call could not delete for a
// reason that may pass; one that does not exist is deleted already.
func undeleted(out *ec2.DeleteLaunchTemplateVersionsOutput) []int64 {
	var failed []int64
	for _, e := range out.UnsuccessfullyDeletedLaunchTemplateVersions {
		if e.ResponseError != nil && e.ResponseError.Code == types.LaunchTemplateErrorCodeUnexpectedError {
			failed = append(failed, deref(e.VersionNumber))
		}
	}
	return failed
}

// templateName is the launch template of a runner: PREFIX-RUNNER as it is
// where EC2 takes it (3 to 128 of ASCII letters, digits and "()./_-").
// Where it does not, each character EC2 refuses becomes "_" and the name,
// cut to fit, ends in a hash of the name asked for: two runners whose
// names differ only in such characters, or past the cut, still get a
// template each, and the same runner always the same.
func templateName(prefix, runner string) string {
	name := prefix + "-" + runner
	if len(name) >= minTemplateName && len(name) <= maxTemplateName && !strings.ContainsFunc(name, refusedInTemplateName) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:templateNameHash]
	var b strings.Builder
	for _, r := range name {
		if b.Len() >= maxTemplateName-len(suffix) {
			break
		}
		if refusedInTemplateName(r) {
			r = '_'
		}
		b.WriteRune(r)
	}
	return b.String() + suffix
}

// EC2's bounds on a launch template's name, and the hex digits of the hash
// that ends a name made to fit them.
const (
	minTemplateName  = 3
	maxTemplateName  = 128
	templateNameHash = 10
)

func refusedInTemplateName(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return false
	}
	return !strings.ContainsRune("()./_-", r)
}

// templateTags mark a launch template as this controller's.
func (c *Cloud) templateTags() []types.TagSpecification {
	if c.opts.ControllerID == "" {
		return nil
	}
	return []types.TagSpecification{{ResourceType: types.ResourceTypeLaunchTemplate,
		Tags: ec2Tags(map[string]string{domain.TagController: c.opts.ControllerID})}}
}

func isCode(err error, code string) bool {
	var ce *domain.CloudError
	return errors.As(mapError("", err), &ce) && ce.Code == code
}
