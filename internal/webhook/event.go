package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Actions of workflow_job that bullpen handles. GitHub sends no others today;
// any new one is ignored rather than refused, so GitHub never sees a failure
// for an event bullpen has no use for.
const (
	ActionQueued     = "queued"
	ActionWaiting    = "waiting"
	ActionInProgress = "in_progress"
	ActionCompleted  = "completed"
)

// Payload errors. ParseWorkflowJob returns errors that wrap one of them.
var (
	// ErrInvalidPayload: the payload is not JSON, or a field bullpen needs
	// is missing or of the wrong type. The sender must fix it.
	ErrInvalidPayload = errors.New("invalid workflow_job payload")
	// ErrUnhandledAction: a well-formed event with an action bullpen does
	// not act on.
	ErrUnhandledAction = errors.New("unhandled workflow_job action")
)

// FieldError names the payload field that is missing or invalid. Its message
// reads like "workflow_job.id is missing" and carries no payload content, so
// it is safe to log and to return to the sender.
type FieldError struct {
	Field   string // dotted JSON path
	Problem string // "is missing", "must be a positive integer", …
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

// Unwrap makes every FieldError an ErrInvalidPayload.
func (e *FieldError) Unwrap() error { return ErrInvalidPayload }

// WorkflowJob is the part of a workflow_job payload bullpen uses. Optional
// fields GitHub sends as null are zero.
type WorkflowJob struct {
	ID           int64
	RunID        int64
	RunAttempt   int
	Name         string
	WorkflowName string
	Status       string // queued, waiting, in_progress, completed
	Conclusion   string
	Labels       []string // never nil: empty when GitHub sends []
	RunnerID     int64
	RunnerName   string
	HeadBranch   string
	HTMLURL      string
	CreatedAt    time.Time
	StartedAt    time.Time
	CompletedAt  time.Time
}

// WorkflowJobEvent is one validated workflow_job delivery.
type WorkflowJobEvent struct {
	Action string // one of the Action constants
	Job    WorkflowJob
	Repo   string // repository.full_name: owner/name
}

// GitHubJob converts the event to the job as the GitHub port reports it.
func (e WorkflowJobEvent) GitHubJob() domain.GitHubJob {
	return domain.GitHubJob{
		ID:         e.Job.ID,
		RunID:      e.Job.RunID,
		RunAttempt: e.Job.RunAttempt,
		Repo:       e.Repo,
		Name:       e.Job.Name,
		Workflow:   e.Job.WorkflowName,
		Status:     e.Job.Status,
		Conclusion: e.Job.Conclusion,
		Labels:     append([]string(nil), e.Job.Labels...),
		RunnerName: e.Job.RunnerName,
		CreatedAt:  e.Job.CreatedAt,
	}
}

// Pointers tell a missing or null field from a zero value.
type wireEvent struct {
	Action      *string  `json:"action"`
	WorkflowJob *wireJob `json:"workflow_job"`
	Repository  *struct {
		FullName *string `json:"full_name"`
	} `json:"repository"`
}

type wireJob struct {
	ID           *int64     `json:"id"`
	RunID        *int64     `json:"run_id"`
	RunAttempt   *int       `json:"run_attempt"`
	Name         *string    `json:"name"`
	WorkflowName *string    `json:"workflow_name"`
	Status       *string    `json:"status"`
	Conclusion   *string    `json:"conclusion"`
	Labels       *[]*string `json:"labels"`
	RunnerID     *int64     `json:"runner_id"`
	RunnerName   *string    `json:"runner_name"`
	HeadBranch   *string    `json:"head_branch"`
	HTMLURL      *string    `json:"html_url"`
	CreatedAt    *string    `json:"created_at"`
	StartedAt    *string    `json:"started_at"`
	CompletedAt  *string    `json:"completed_at"`
}

// ParseWorkflowJob validates a workflow_job payload and extracts the fields
// bullpen uses. The webhook handler refuses what it refuses, so a delivery
// in the inbox always parses. Errors wrap ErrInvalidPayload (most are a
// *FieldError) or ErrUnhandledAction; with the latter the event's Action is
// set.
func ParseWorkflowJob(payload []byte) (WorkflowJobEvent, error) {
	var w wireEvent
	if err := json.Unmarshal(payload, &w); err != nil {
		return WorkflowJobEvent{}, decodeError(err)
	}
	if w.Action == nil || *w.Action == "" {
		return WorkflowJobEvent{}, &FieldError{"action", "is missing"}
	}
	ev := WorkflowJobEvent{Action: *w.Action}
	switch ev.Action {
	case ActionQueued, ActionWaiting, ActionInProgress, ActionCompleted:
	default:
		return ev, fmt.Errorf("%w %q", ErrUnhandledAction, ev.Action)
	}
	repo, err := parseRepo(w)
	if err != nil {
		return WorkflowJobEvent{}, err
	}
	if w.WorkflowJob == nil {
		return WorkflowJobEvent{}, &FieldError{"workflow_job", "is missing"}
	}
	job, err := parseJob(w.WorkflowJob)
	if err != nil {
		return WorkflowJobEvent{}, err
	}
	ev.Job, ev.Repo = job, repo
	return ev, nil
}

func parseRepo(w wireEvent) (string, error) {
	if w.Repository == nil {
		return "", &FieldError{"repository", "is missing"}
	}
	if w.Repository.FullName == nil {
		return "", &FieldError{"repository.full_name", "is missing"}
	}
	name := *w.Repository.FullName
	owner, repo, ok := strings.Cut(name, "/")
	if !ok || owner == "" || repo == "" || strings.Contains(repo, "/") {
		return "", &FieldError{"repository.full_name", "must be owner/name"}
	}
	return name, nil
}

func parseJob(w *wireJob) (WorkflowJob, error) {
	if err := positive("workflow_job.id", w.ID); err != nil {
		return WorkflowJob{}, err
	}
	if err := positive("workflow_job.run_id", w.RunID); err != nil {
		return WorkflowJob{}, err
	}
	labels, err := parseLabels(w.Labels)
	if err != nil {
		return WorkflowJob{}, err
	}
	job := WorkflowJob{
		ID:           *w.ID,
		RunID:        *w.RunID,
		RunAttempt:   deref(w.RunAttempt),
		Name:         deref(w.Name),
		WorkflowName: deref(w.WorkflowName),
		Status:       deref(w.Status),
		Conclusion:   deref(w.Conclusion),
		Labels:       labels,
		RunnerID:     deref(w.RunnerID),
		RunnerName:   deref(w.RunnerName),
		HeadBranch:   deref(w.HeadBranch),
		HTMLURL:      deref(w.HTMLURL),
	}
	times := []struct {
		field string
		in    *string
		out   *time.Time
	}{
		{"workflow_job.created_at", w.CreatedAt, &job.CreatedAt},
		{"workflow_job.started_at", w.StartedAt, &job.StartedAt},
		{"workflow_job.completed_at", w.CompletedAt, &job.CompletedAt},
	}
	for _, t := range times {
		if *t.out, err = parseTime(t.field, t.in); err != nil {
			return WorkflowJob{}, err
		}
	}
	return job, nil
}

func positive(field string, v *int64) error {
	if v == nil {
		return &FieldError{field, "is missing"}
	}
	if *v <= 0 {
		return &FieldError{field, "must be a positive integer"}
	}
	return nil
}

func parseLabels(in *[]*string) ([]string, error) {
	if in == nil {
		return nil, &FieldError{"workflow_job.labels", "is missing"}
	}
	out := make([]string, len(*in))
	for i, l := range *in {
		if l == nil {
			return nil, &FieldError{fmt.Sprintf("workflow_job.labels[%d]", i), "must be a string"}
		}
		out[i] = *l
	}
	return out, nil
}

func parseTime(field string, s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return time.Time{}, &FieldError{field, "must be an RFC 3339 time"}
	}
	// The store refuses what the domain's check refuses: accepted here, the
	// delivery would fail every intake step, then be dead-lettered, and the
	// sender never told. The check's own error quotes the value.
	if domain.CheckTime(field, t) != nil {
		return time.Time{}, &FieldError{field, "must be in years 1 to 9999 (UTC)"}
	}
	return t, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// decodeError turns encoding/json's errors into messages that name the field
// or the byte offset but quote no payload content and no Go type names.
func decodeError(err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("%w: malformed JSON at byte %d", ErrInvalidPayload, syn.Offset)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		if typ.Field == "" {
			return fmt.Errorf("%w: the payload must be a JSON object", ErrInvalidPayload)
		}
		return &FieldError{typ.Field, "must be " + expected(typ.Field, typ.Type)}
	}
	return fmt.Errorf("%w: malformed JSON", ErrInvalidPayload)
}

func expected(field string, t reflect.Type) string {
	if field == "workflow_job.labels" {
		return "an array of strings"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Struct:
		return "an object"
	default:
		return "of another type"
	}
}
