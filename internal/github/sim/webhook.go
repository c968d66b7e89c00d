package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// EventWorkflowJob is the event name (X-GitHub-Event) of the sim's webhooks.
const EventWorkflowJob = "workflow_job"

// The payload types follow GitHub's workflow_job webhook: the same field
// names and nesting, with null where GitHub sends null. The tests compare
// them with the real examples of @octokit/webhooks-examples.
type workflowJobEvent struct {
	Action       string          `json:"action"`
	WorkflowJob  workflowJobBody `json:"workflow_job"`
	Repository   repositoryBody  `json:"repository"`
	Organization orgBody         `json:"organization"`
	Sender       accountBody     `json:"sender"`
}

type workflowJobBody struct {
	ID              int64      `json:"id"`
	RunID           int64      `json:"run_id"`
	WorkflowName    string     `json:"workflow_name"`
	HeadBranch      string     `json:"head_branch"`
	RunURL          string     `json:"run_url"`
	RunAttempt      int        `json:"run_attempt"`
	NodeID          string     `json:"node_id"`
	HeadSHA         string     `json:"head_sha"`
	URL             string     `json:"url"`
	HTMLURL         string     `json:"html_url"`
	Status          string     `json:"status"`
	Conclusion      *string    `json:"conclusion"`
	CreatedAt       string     `json:"created_at"`
	StartedAt       string     `json:"started_at"`
	CompletedAt     *string    `json:"completed_at"`
	Name            string     `json:"name"`
	Steps           []stepBody `json:"steps"`
	CheckRunURL     string     `json:"check_run_url"`
	Labels          []string   `json:"labels"`
	RunnerID        *int64     `json:"runner_id"`
	RunnerName      *string    `json:"runner_name"`
	RunnerGroupID   *int64     `json:"runner_group_id"`
	RunnerGroupName *string    `json:"runner_group_name"`
}

type stepBody struct {
	Name        string  `json:"name"`
	Status      string  `json:"status"`
	Conclusion  *string `json:"conclusion"`
	Number      int     `json:"number"`
	StartedAt   *string `json:"started_at"`
	CompletedAt *string `json:"completed_at"`
}

type repositoryBody struct {
	ID            int64       `json:"id"`
	NodeID        string      `json:"node_id"`
	Name          string      `json:"name"`
	FullName      string      `json:"full_name"`
	Private       bool        `json:"private"`
	Owner         accountBody `json:"owner"`
	HTMLURL       string      `json:"html_url"`
	Description   *string     `json:"description"`
	Fork          bool        `json:"fork"`
	URL           string      `json:"url"`
	DefaultBranch string      `json:"default_branch"`
	Visibility    string      `json:"visibility"`
}

// orgBody is the organisation as webhooks describe it (GitHub's
// organization-simple, not a user account).
type orgBody struct {
	Login       string  `json:"login"`
	ID          int64   `json:"id"`
	NodeID      string  `json:"node_id"`
	URL         string  `json:"url"`
	ReposURL    string  `json:"repos_url"`
	Description *string `json:"description"`
}

type accountBody struct {
	Login     string `json:"login"`
	ID        int64  `json:"id"`
	NodeID    string `json:"node_id"`
	URL       string `json:"url"`
	HTMLURL   string `json:"html_url"`
	Type      string `json:"type"`
	SiteAdmin bool   `json:"site_admin"`
}

const (
	apiURL = "https://api.github.com"
	webURL = "https://github.com"
)

// emit queues the webhook for j's current state, or counts it dropped.
// Called under g.mu.
func (g *GitHub) emit(action string, j *job) {
	body, err := json.Marshal(g.event(action, j))
	if err != nil {
		panic(fmt.Sprintf("sim: encode webhook: %v", err)) // the types above always encode
	}
	id := g.deliveryID()
	if g.dropNext > 0 {
		g.dropNext--
		g.dropped++
		return
	}
	g.delivered++
	if deliver := g.opts.Deliver; deliver != nil {
		g.enqueue(func() { deliver(EventWorkflowJob, id, body) })
	}
}

func (g *GitHub) event(action string, j *job) workflowJobEvent {
	owner, name, _ := strings.Cut(j.Repo, "/")
	repoURL := apiURL + "/repos/" + j.Repo
	wj := workflowJobBody{
		ID: j.ID, RunID: j.RunID, WorkflowName: j.Workflow, HeadBranch: j.headBranch,
		RunURL:     fmt.Sprintf("%s/actions/runs/%d", repoURL, j.RunID),
		RunAttempt: j.RunAttempt, NodeID: nodeID("CR_kwDO", j.ID), HeadSHA: g.runs[j.RunID].headSHA,
		URL:         fmt.Sprintf("%s/actions/jobs/%d", repoURL, j.ID),
		HTMLURL:     fmt.Sprintf("%s/%s/actions/runs/%d/job/%d", webURL, j.Repo, j.RunID, j.ID),
		Status:      j.Status,
		Conclusion:  nonEmpty(j.Conclusion),
		CreatedAt:   stamp(j.CreatedAt),
		StartedAt:   stamp(j.CreatedAt), // GitHub sets it at creation and again at start
		CompletedAt: optStamp(j.completedAt),
		Name:        j.Name,
		Steps:       steps(j),
		CheckRunURL: fmt.Sprintf("%s/check-runs/%d", repoURL, j.ID),
		Labels:      append([]string{}, j.Labels...),
	}
	if !j.startedAt.IsZero() {
		wj.StartedAt = stamp(j.startedAt)
	}
	if j.runnerID != 0 {
		group := int64(DefaultRunnerGroupID)
		wj.RunnerID, wj.RunnerName = &j.runnerID, &j.RunnerName
		wj.RunnerGroupID, wj.RunnerGroupName = &group, ptr(DefaultRunnerGroupName)
	}
	org := g.account(owner, "Organization")
	orgURL := apiURL + "/orgs/" + owner
	return workflowJobEvent{
		Action:      action,
		WorkflowJob: wj,
		Repository: repositoryBody{
			ID: g.repoID(j.Repo), NodeID: nodeID("R_kgDO", g.repoID(j.Repo)), Name: name, FullName: j.Repo,
			Private: true, Owner: org, HTMLURL: webURL + "/" + j.Repo, URL: repoURL,
			DefaultBranch: DefaultHeadBranch, Visibility: "private",
		},
		Organization: orgBody{Login: org.Login, ID: org.ID, NodeID: org.NodeID, URL: orgURL, ReposURL: orgURL + "/repos"},
		Sender:       g.account(g.opts.Sender, "User"),
	}
}

// steps sketches the job's steps as GitHub reports them at this point.
func steps(j *job) []stepBody {
	if j.startedAt.IsZero() {
		return []stepBody{}
	}
	start := ptr(stamp(j.startedAt))
	if j.Status != StatusCompleted {
		return []stepBody{{Name: "Set up job", Status: StatusInProgress, Number: 1, StartedAt: start}}
	}
	end := optStamp(j.completedAt)
	return []stepBody{
		{Name: "Set up job", Status: StatusCompleted, Conclusion: ptr(ConclusionSuccess), Number: 1, StartedAt: start, CompletedAt: start},
		{Name: "Run job", Status: StatusCompleted, Conclusion: ptr(j.Conclusion), Number: 2, StartedAt: start, CompletedAt: end},
	}
}

// account describes a user or organisation with a stable id. Called under
// g.mu.
func (g *GitHub) account(login, kind string) accountBody {
	id, ok := g.accounts[strings.ToLower(login)]
	if !ok {
		g.lastAcct++
		id = g.lastAcct
		g.accounts[strings.ToLower(login)] = id
	}
	prefix := "U_kgDO"
	if kind == "Organization" {
		prefix = "O_kgDO"
	}
	return accountBody{
		Login: login, ID: id, NodeID: nodeID(prefix, id), Type: kind,
		URL: apiURL + "/users/" + login, HTMLURL: webURL + "/" + login,
	}
}

// repoID returns the repository's stable id. Called under g.mu.
func (g *GitHub) repoID(repo string) int64 {
	key := strings.ToLower(repo)
	id, ok := g.repos[key]
	if !ok {
		id = int64(500_000_000 + len(g.repos) + 1)
		g.repos[key] = id
	}
	return id
}

// deliveryID returns a UUID-shaped id (as X-GitHub-Delivery is): random
// high bits from the seeded generator, low bits a bijection of the delivery
// count, so ids never repeat. Called under g.mu.
func (g *GitHub) deliveryID() string {
	g.deliveries++
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], g.rng.Uint64())
	binary.BigEndian.PutUint64(b[8:], (g.deliveries*0x9e3779b97f4a7c15)&(1<<62-1)|1<<63)
	b[6] = b[6]&0x0f | 0x40 // version 4
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func nodeID(prefix string, id int64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(id))
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// stamp formats t as GitHub's webhooks do.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

func optStamp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return ptr(stamp(t))
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func ptr[T any](v T) *T { return &v }
