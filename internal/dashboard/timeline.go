package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// event is one step of a job's timeline. Kind names it for people and
// for tests (data-event).
type event struct {
	At     time.Time
	Kind   string
	Text   string
	Link   string // an instance or job this step names
	LinkTo string
}

// notRecorded lists the steps of a job that the store keeps no time for
// (yet): the timeline says so rather than guess them.
var notRecorded = []string{
	"webhook delivered (the delivery's receipt time is dropped once intake has read it)",
	"runner registered (the agent's report moves the instance to running; the time is not kept)",
	"released (the instance's release is a state change of the instance; the time is kept only until its next change)",
}

type jobView struct {
	jobRow
	Instance    *domain.Instance
	Events      []event
	NotRecorded []string
}

// errNoJob is a job the store does not know (or no longer keeps).
var errNoJob = errors.New("no such job")

func (d *Dashboard) jobPage(r *http.Request, s *snapshot) (pageResult, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return pageResult{}, errNoJob
	}
	j, ok := s.job(id)
	if !ok {
		// An older job: one query, on a page load only (final jobs are
		// not live).
		if j, err = d.opts.Store.GetJob(r.Context(), id); errors.Is(err, domain.ErrNotFound) {
			return pageResult{}, errNoJob
		} else if err != nil {
			return pageResult{}, fmt.Errorf("get job %d: %w", id, err)
		}
	}
	v := jobView{jobRow: rowOf(j), NotRecorded: notRecorded}
	if in, ok := s.instance(j.InstanceID); ok {
		v.Instance = &in
	}
	v.Events = timeline(j, v.Instance)
	return pageResult{Title: fmt.Sprintf("Job %d", j.ID), Data: v, Live: !j.Status.Final()}, nil
}

// timeline orders what the store holds of a job's life: its own
// timestamps, and what its instance's row says of the instance.
func timeline(j domain.Job, in *domain.Instance) []event {
	var evs []event
	add := func(at time.Time, kind, text string) *event {
		if at.IsZero() {
			return nil
		}
		evs = append(evs, event{At: at, Kind: kind, Text: text})
		return &evs[len(evs)-1]
	}
	add(j.QueuedAt, "queued", "GitHub queued the job")
	add(j.CreatedAt, "routed", routed(j))
	if e := add(j.AssignedAt, "assigned", assigned(j)); e != nil && j.InstanceID != "" {
		e.Link, e.LinkTo = j.InstanceID, "/instances?id="+j.InstanceID
	}
	// The instance's role is no witness: one back from a job is on-demand
	// whatever it was when it took this one.
	if in != nil && j.Via == domain.ViaCold && !in.CreatedAt.Before(j.CreatedAt) {
		add(in.CreatedAt, "launched", "instance "+in.ID+" launched for a job (cold start)")
	}
	add(j.StartedAt, "started", "started on runner "+cmp.Or(j.RunnerName, "(unknown)"))
	add(j.CompletedAt, "finished", "finished: "+cmp.Or(j.Conclusion, "no conclusion given"))
	if in != nil && in.StateSince.After(j.AssignedAt) && !j.AssignedAt.IsZero() {
		add(in.StateSince, "instance", instanceNow(j, *in))
	}
	slices.SortStableFunc(evs, func(a, b event) int { return a.At.Compare(b.At) })
	return evs
}

func routed(j domain.Job) string {
	switch {
	case j.Status == domain.JobRejected:
		return "rejected: " + j.Reason
	case j.Reason == domain.ReasonWaitingForApproval:
		return "recorded; GitHub holds it for an approval"
	case j.Route == domain.RoutePool:
		return "recorded and sent to the pool queue of " + j.Pool
	case j.Route == domain.RouteLaunch:
		return "recorded and sent to the launch queue (runner " + j.Runner + ": reuse first, else a new instance)"
	}
	return "recorded"
}

// assigned says how the job got its instance as recorded at the claim, not
// from the instance's role now, which changes once it is released.
func assigned(j domain.Job) string {
	how := map[domain.Via]string{
		domain.ViaHot:     "a running member of pool " + j.Pool + " (hot)",
		domain.ViaStopped: "a stopped member of pool " + j.Pool + ", started for it",
		domain.ViaPool:    "a member of pool " + j.Pool + " (hot or stopped: not recorded)",
		domain.ViaReuse:   "an idle instance back from an earlier job (reuse)",
		domain.ViaCold:    "a new instance (cold start)",
	}[j.Via]
	s := "assigned to instance " + j.InstanceID
	if how != "" {
		s += ", " + how
	}
	if j.RunnerName != "" {
		s += "; runner " + j.RunnerName
	}
	if j.Attempts > 1 {
		s += fmt.Sprintf("; attempt %d (earlier attempts are not kept)", j.Attempts)
	}
	return s
}

// instanceNow describes where the job's instance is now, as its row says.
func instanceNow(j domain.Job, in domain.Instance) string {
	s := fmt.Sprintf("instance %s is %s", in.ID, in.State)
	if in.Reason != "" {
		s += ": " + in.Reason
	}
	if in.Job != "" && in.Job != j.Key() {
		s += " (it has taken job " + in.Job + " since)"
	}
	return s
}
