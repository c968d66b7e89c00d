package appplatform

import (
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// SelfHostedLabel is the label GitHub gives every self-hosted runner; a job
// asking for it is one this autoscaler's runners may serve.
const SelfHostedLabel = "self-hosted"

// Demand is the job demand of one poll, as the autoscaler counts it.
type Demand struct {
	Queued     int // queued jobs asking for a self-hosted runner
	InProgress int // in-progress jobs on this deployment's runners
}

// Total is the demand the autoscaler decides on.
func (d Demand) Total() int { return d.Queued + d.InProgress }

// CountDemand applies the specification's job filtering: a queued job counts when
// its labels include self-hosted (in any case, as GitHub matches labels);
// an in-progress job counts when its runner's name starts with prefix,
// or, with an empty prefix, when it asked for a self-hosted runner (so
// jobs on GitHub-hosted runners never count).
func CountDemand(queued, inProgress []domain.GitHubJob, prefix string) Demand {
	var d Demand
	for _, j := range queued {
		if j.Status == "queued" && selfHosted(j.Labels) {
			d.Queued++
		}
	}
	for _, j := range inProgress {
		if j.Status == "in_progress" && ownsInProgress(j, prefix) {
			d.InProgress++
		}
	}
	return d
}

func ownsInProgress(j domain.GitHubJob, prefix string) bool {
	if prefix == "" {
		return selfHosted(j.Labels)
	}
	return strings.HasPrefix(j.RunnerName, prefix)
}

func selfHosted(labels []string) bool {
	for _, l := range labels {
		if strings.EqualFold(strings.TrimSpace(l), SelfHostedLabel) {
			return true
		}
	}
	return false
}

// DeadRunners picks the runners that look dead: offline and not busy
// (crashed without deregistering, or just registering, or restarting),
// and, when prefix is set, named with it, so that other deployments'
// runners in the same scope are left alone. The scaler removes one only
// when it looks dead at two polls in a row.
func DeadRunners(runners []domain.GitHubRunner, prefix string) []domain.GitHubRunner {
	var dead []domain.GitHubRunner
	for _, r := range runners {
		if !r.Online && !r.Busy && strings.HasPrefix(r.Name, prefix) {
			dead = append(dead, r)
		}
	}
	return dead
}
