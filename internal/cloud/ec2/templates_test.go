package ec2_test

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func otherLaunch(n int, runner domain.RunnerSpec, launch string) domain.LaunchSpec {
	spec := launchSpec(n, runner)
	spec.ClientToken, spec.Tags[domain.TagLaunch], spec.Agent.LaunchID = launch, launch, launch
	return spec
}

// Two launches of one runner in one process make its template once: the
// second waits for the first rather than race it to CreateLaunchTemplate.
func TestOneProcessMakesATemplateOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.templates = map[string]string{}
		release := make(chan struct{})
		f.createTemplate = func(string) error { <-release; return nil }
		c := newFakeCloud(t, f, ec2.Options{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, launch := range []string{"launch-a", "launch-b"} {
			wg.Go(func() { _, errs[i] = c.Create(t.Context(), otherLaunch(1, small, launch)) })
			synctest.Wait() // the first holds the creation; the second waits for it, or races it
		}
		close(release)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || f.calls["CreateLaunchTemplate"] != 1 {
			t.Fatalf("%v, %v after %d CreateLaunchTemplate; want both launched after one", errs[0], errs[1], f.calls["CreateLaunchTemplate"])
		}
	})
}

// A template another replica made between the describe and the create is
// described again and used, not reported as an invalid request.
func TestATemplateAnotherProcessMadeIsUsed(t *testing.T) {
	f := newFake()
	f.templates = map[string]string{}
	f.createTemplate = func(name string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.templates[name] = "lt-other"
		return apiError("InvalidLaunchTemplateName.AlreadyExistsException", "Launch template name already in use.")
	}
	_, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(1, small))
	if err != nil || len(f.versions) != 1 || aws.ToString(f.versions[0].LaunchTemplateId) != "lt-other" {
		t.Fatalf("%v, versions %d; want a launch from lt-other", err, len(f.versions))
	}
}

// A template deleted behind the provider's back is forgotten and made
// again, within the launch that finds it gone.
func TestAGoneTemplateIsMadeAgain(t *testing.T) {
	f := newFake()
	f.templates = map[string]string{"bullpen-small": "lt-old"}
	c := newFakeCloud(t, f, ec2.Options{})
	if _, err := c.Create(t.Context(), otherLaunch(1, small, "launch-a")); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	delete(f.templates, "bullpen-small")
	f.mu.Unlock()
	f.version = func(id string) error {
		if id == "lt-old" {
			return apiError("InvalidLaunchTemplateId.NotFound", "The specified launch template, with template ID lt-old, does not exist.")
		}
		return nil
	}
	_, err := c.Create(t.Context(), otherLaunch(1, small, "launch-b"))
	last := f.versions[len(f.versions)-1]
	if err != nil || f.calls["CreateLaunchTemplate"] != 1 || aws.ToString(last.LaunchTemplateId) == "lt-old" {
		t.Fatalf("%v after %d CreateLaunchTemplate, last version on %s; want the template made again and used",
			err, f.calls["CreateLaunchTemplate"], aws.ToString(last.LaunchTemplateId))
	}
}

// A fleet refused because its template is gone makes the next launch
// find or make the template again.
func TestAFleetWhoseTemplateIsGoneForgetsIt(t *testing.T) {
	f := newFake()
	f.fleet = func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
		if n == 1 {
			return nil, apiError("InvalidLaunchTemplateId.NotFound", "The specified launch template does not exist.")
		}
		return fleetOf(1, n), nil
	}
	c := newFakeCloud(t, f, ec2.Options{})
	// Not an invalid request: the template is bullpen's own, and the next
	// launch makes it again; the jobs are tried again, not rejected.
	if _, err := c.Create(t.Context(), otherLaunch(1, small, "launch-a")); err == nil || errors.Is(err, domain.ErrInvalidRequest) {
		t.Fatalf("first launch: %v", err)
	}
	if _, err := c.Create(t.Context(), otherLaunch(1, small, "launch-b")); err != nil || f.calls["DescribeLaunchTemplates"] != 2 {
		t.Fatalf("%v after %d DescribeLaunchTemplates; want the template looked up again", err, f.calls["DescribeLaunchTemplates"])
	}
}

// A runner name with characters EC2 refuses in a launch template's name
// (":", "@", non-ASCII), or too long for one, gets a name EC2 takes, its
// own and the same at every launch; a name EC2 takes is kept as it was,
// so that the templates made before are found.
func TestTemplateNamesAreOnesEC2Takes(t *testing.T) {
	f := newFake()
	f.templates = map[string]string{}
	long := strings.Repeat("long", 40)
	runners := []string{"small", "gpu_a100", "gpu:a100", "gpu@a100", "größe", "gr_e", long, long + "er"}
	launch := func(c *ec2.Cloud, i int, name string) {
		r := small
		r.Name = name
		if _, err := c.Create(t.Context(), otherLaunch(1, r, fmt.Sprintf("launch-%d", i))); err != nil {
			t.Fatalf("runner %q: %v", name, err)
		}
	}
	for i, name := range runners {
		launch(newFakeCloud(t, f, ec2.Options{}), i, name)
	}
	valid := regexp.MustCompile(`^[a-zA-Z0-9().\-/_]{3,128}$`)
	for name := range f.templates {
		if !valid.MatchString(name) {
			t.Errorf("template name %q is not one EC2 takes", name)
		}
	}
	if len(f.templates) != len(runners) || f.templates["bullpen-small"] == "" || f.templates["bullpen-gpu_a100"] == "" {
		t.Fatalf("templates %v; want one per runner, the valid names kept", slices.Sorted(maps.Keys(f.templates)))
	}
	for i, name := range runners {
		launch(newFakeCloud(t, f, ec2.Options{}), i, name)
	}
	if f.calls["CreateLaunchTemplate"] != len(runners) {
		t.Errorf("%d templates created for %d runners launched twice; want each found again", f.calls["CreateLaunchTemplate"], len(runners))
	}
}

// A launch version whose delete failed, or that EC2 reported as not
// deleted, is deleted with the template's next launch version; one that
// does not exist any more is not asked for again.
func TestAVersionNotDeletedIsDeletedWithTheNext(t *testing.T) {
	f := newFake()
	answers := []func([]string) (*awsec2.DeleteLaunchTemplateVersionsOutput, error){
		func([]string) (*awsec2.DeleteLaunchTemplateVersionsOutput, error) {
			return nil, apiError("InternalError", "An internal error has occurred.")
		},
		func([]string) (*awsec2.DeleteLaunchTemplateVersionsOutput, error) {
			return &awsec2.DeleteLaunchTemplateVersionsOutput{UnsuccessfullyDeletedLaunchTemplateVersions: []types.DeleteLaunchTemplateVersionsResponseErrorItem{
				{VersionNumber: aws.Int64(2), ResponseError: &types.ResponseError{Code: types.LaunchTemplateErrorCodeUnexpectedError}},
				{VersionNumber: aws.Int64(3), ResponseError: &types.ResponseError{Code: types.LaunchTemplateErrorCodeLaunchTemplateVersionDoesNotExist}},
			}}, nil
		},
	}
	f.deleteVersions = func(v []string) (*awsec2.DeleteLaunchTemplateVersionsOutput, error) {
		if len(answers) == 0 {
			return &awsec2.DeleteLaunchTemplateVersionsOutput{}, nil
		}
		answer := answers[0]
		answers = answers[1:]
		return answer(v)
	}
	c := newFakeCloud(t, f, ec2.Options{})
	for _, launch := range []string{"launch-a", "launch-b", "launch-c", "launch-d"} {
		if _, err := c.Create(t.Context(), otherLaunch(1, small, launch)); err != nil {
			t.Fatal(err)
		}
	}
	want := [][]string{{"2"}, {"2", "3"}, {"2", "4"}, {"5"}}
	if !slices.EqualFunc(f.deleteCalls, want, slices.Equal) {
		t.Fatalf("delete calls %v, want %v", f.deleteCalls, want)
	}
}

// Versions whose deletes keep failing are kept up to what one call can
// delete, never more.
func TestVersionsKeptForDeletionAreBounded(t *testing.T) {
	f := newFake()
	f.deleteVersions = func([]string) (*awsec2.DeleteLaunchTemplateVersionsOutput, error) {
		return nil, apiError("InternalError", "An internal error has occurred.")
	}
	c := newFakeCloud(t, f, ec2.Options{})
	for i := range 210 {
		if _, err := c.Create(t.Context(), otherLaunch(1, small, fmt.Sprintf("launch-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	last := f.deleteCalls[len(f.deleteCalls)-1]
	if len(last) != 200 || last[199] != "211" {
		t.Fatalf("last delete call: %d versions ending in %s; want 200, the newest last", len(last), last[len(last)-1])
	}
}
