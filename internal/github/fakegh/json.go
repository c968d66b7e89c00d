package fakegh

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// The builders below render records as GitHub's REST API does: the field
// names, nesting and JSON types of the OpenAPI schemas (job, workflow-run,
// runner, minimal-repository, simple-user), checked against the
// description's examples by shapes_test.go. Links point at the fake.

const htmlBase = "https://github.com"

// actor is who triggers every run.
var actor = &account{id: 583231, login: "monalisa"}

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// nullable is a time GitHub renders as null when unset.
func nullable(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return timestamp(t)
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nodeID(kind string, id int64) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%02d:%s%d", len(kind), kind, id))
}

func (s *Server) userJSON(a *account, kind string) map[string]any {
	u := s.srv.URL + "/users/" + a.login
	return map[string]any{
		"login":               a.login,
		"id":                  a.id,
		"node_id":             nodeID(kind, a.id),
		"avatar_url":          fmt.Sprintf("https://avatars.githubusercontent.com/u/%d?v=4", a.id),
		"gravatar_id":         "",
		"url":                 u,
		"html_url":            htmlBase + "/" + a.login,
		"followers_url":       u + "/followers",
		"following_url":       u + "/following{/other_user}",
		"gists_url":           u + "/gists{/gist_id}",
		"starred_url":         u + "/starred{/owner}{/repo}",
		"subscriptions_url":   u + "/subscriptions",
		"organizations_url":   u + "/orgs",
		"repos_url":           u + "/repos",
		"events_url":          u + "/events{/privacy}",
		"received_events_url": u + "/received_events",
		"type":                kind,
		"site_admin":          false,
	}
}

// repoURLs are the repository's hypermedia links: field, path after the
// repository's API URL.
var repoURLs = [][2]string{
	{"archive_url", "/{archive_format}{/ref}"}, {"assignees_url", "/assignees{/user}"},
	{"blobs_url", "/git/blobs{/sha}"}, {"branches_url", "/branches{/branch}"},
	{"collaborators_url", "/collaborators{/collaborator}"}, {"comments_url", "/comments{/number}"},
	{"commits_url", "/commits{/sha}"}, {"compare_url", "/compare/{base}...{head}"},
	{"contents_url", "/contents/{+path}"}, {"contributors_url", "/contributors"},
	{"deployments_url", "/deployments"}, {"downloads_url", "/downloads"},
	{"events_url", "/events"}, {"forks_url", "/forks"},
	{"git_commits_url", "/git/commits{/sha}"}, {"git_refs_url", "/git/refs{/sha}"},
	{"git_tags_url", "/git/tags{/sha}"}, {"issue_comment_url", "/issues/comments{/number}"},
	{"issue_events_url", "/issues/events{/number}"}, {"issues_url", "/issues{/number}"},
	{"keys_url", "/keys{/key_id}"}, {"labels_url", "/labels{/name}"},
	{"languages_url", "/languages"}, {"merges_url", "/merges"},
	{"milestones_url", "/milestones{/number}"}, {"notifications_url", "/notifications{?since,all,participating}"},
	{"pulls_url", "/pulls{/number}"}, {"releases_url", "/releases{/id}"},
	{"stargazers_url", "/stargazers"}, {"statuses_url", "/statuses/{sha}"},
	{"subscribers_url", "/subscribers"}, {"subscription_url", "/subscription"},
	{"tags_url", "/tags"}, {"teams_url", "/teams"},
	{"trees_url", "/git/trees{/sha}"}, {"hooks_url", "/hooks"},
}

func (s *Server) repoJSON(r *repo) map[string]any {
	api := s.srv.URL + "/repos/" + r.fullName()
	full := r.fullName()
	out := map[string]any{
		"id": r.id, "node_id": nodeID("Repository", r.id), "name": r.name, "full_name": full,
		"owner": s.userJSON(r.owner, "Organization"), "private": true,
		"html_url": htmlBase + "/" + full, "description": nil, "fork": false, "url": api,
		"git_url": "git://github.com/" + full + ".git", "ssh_url": "git@github.com:" + full + ".git",
		"clone_url": htmlBase + "/" + full + ".git", "svn_url": htmlBase + "/" + full,
		"mirror_url": nil, "homepage": nil, "language": nil,
		"forks_count": 0, "stargazers_count": 0, "watchers_count": 0, "size": 0,
		"default_branch": DefaultHeadBranch, "open_issues_count": 0, "is_template": false,
		"topics": []string{}, "has_issues": true, "has_projects": true, "has_wiki": false,
		"has_pages": false, "has_downloads": true, "has_discussions": false,
		"archived": r.archived, "disabled": false, "visibility": "private",
		"pushed_at": timestamp(r.created), "created_at": timestamp(r.created), "updated_at": timestamp(r.created),
		"permissions": map[string]bool{"admin": true, "push": true, "pull": true},
		"security_and_analysis": map[string]any{
			"advanced_security":                         map[string]string{"status": "disabled"},
			"secret_scanning":                           map[string]string{"status": "disabled"},
			"secret_scanning_push_protection":           map[string]string{"status": "disabled"},
			"secret_scanning_non_provider_patterns":     map[string]string{"status": "disabled"},
			"secret_scanning_delegated_alert_dismissal": map[string]string{"status": "disabled"},
		},
	}
	for _, u := range repoURLs {
		out[u[0]] = api + u[1]
	}
	return out
}

func (s *Server) runJSON(ru *run) map[string]any {
	full := ru.repo.fullName()
	api := fmt.Sprintf("%s/repos/%s/actions/runs/%d", s.srv.URL, full, ru.id)
	status, conclusion := ru.status()
	updated := ru.created
	for _, j := range ru.jobs {
		updated = latest(updated, j.created, j.started, j.completed)
	}
	workflowID := int64(len(ru.workflow)) + 160_000
	commit := map[string]any{
		"id": ru.headSHA, "tree_id": strings.Repeat("b", 40), "message": "Run " + ru.workflow,
		"timestamp": timestamp(ru.created),
		"author":    map[string]string{"name": "Mona Lisa", "email": "monalisa@example.com"},
		"committer": map[string]string{"name": "GitHub", "email": "noreply@github.com"},
	}
	return map[string]any{
		"id": ru.id, "name": ru.workflow, "node_id": nodeID("WorkflowRun", ru.id),
		"check_suite_id": ru.id + 1, "check_suite_node_id": nodeID("CheckSuite", ru.id+1),
		"head_branch": DefaultHeadBranch, "head_sha": ru.headSHA,
		"path":       ".github/workflows/" + strings.ToLower(ru.workflow) + ".yml",
		"run_number": ru.number, "event": "push", "display_title": "Run " + ru.workflow,
		"status": status, "conclusion": orNull(conclusion), "workflow_id": workflowID,
		"url": api, "html_url": fmt.Sprintf("%s/%s/actions/runs/%d", htmlBase, full, ru.id),
		"pull_requests": []any{}, "created_at": timestamp(ru.created), "updated_at": timestamp(updated),
		"actor": s.userJSON(actor, "User"), "run_attempt": ru.attempt(), "run_started_at": timestamp(ru.created),
		"triggering_actor": s.userJSON(actor, "User"),
		"jobs_url":         api + "/jobs", "logs_url": api + "/logs",
		"check_suite_url": fmt.Sprintf("%s/repos/%s/check-suites/%d", s.srv.URL, full, ru.id+1),
		"artifacts_url":   api + "/artifacts", "cancel_url": api + "/cancel", "rerun_url": api + "/rerun",
		"previous_attempt_url": nil,
		"workflow_url":         fmt.Sprintf("%s/repos/%s/actions/workflows/%d", s.srv.URL, full, workflowID),
		"head_commit":          commit,
		"repository":           s.repoJSON(ru.repo), "head_repository": s.repoJSON(ru.repo),
	}
}

func latest(t time.Time, more ...time.Time) time.Time {
	for _, m := range more {
		if m.After(t) {
			t = m
		}
	}
	return t
}

func (s *Server) jobJSON(j *job) map[string]any {
	full := j.run.repo.fullName()
	api := s.srv.URL + "/repos/" + full
	started := j.started
	if started.IsZero() {
		started = j.created // GitHub reports a queued job as started when it was created
	}
	var runnerID, groupID, groupName any
	if j.runner != nil {
		runnerID, groupID, groupName = j.runner.id, DefaultRunnerGroupID, DefaultRunnerGroupName
	}
	steps := []any{}
	if j.status != "queued" {
		steps = append(steps, map[string]any{
			"name": "Set up job", "status": "completed", "conclusion": "success", "number": 1,
			"started_at": timestamp(started), "completed_at": timestamp(started),
		})
	}
	return map[string]any{
		"id": j.id, "run_id": j.run.id, "run_url": fmt.Sprintf("%s/actions/runs/%d", api, j.run.id),
		"run_attempt": j.attempt, "node_id": nodeID("CheckRun", j.id), "head_sha": j.run.headSHA,
		"url":      fmt.Sprintf("%s/actions/jobs/%d", api, j.id),
		"html_url": fmt.Sprintf("%s/%s/actions/runs/%d/job/%d", htmlBase, full, j.run.id, j.id),
		"status":   j.status, "conclusion": orNull(j.conclusion),
		"created_at": timestamp(j.created), "started_at": timestamp(started), "completed_at": nullable(j.completed),
		"name": j.name, "steps": steps, "check_run_url": fmt.Sprintf("%s/check-runs/%d", api, j.id),
		"labels": j.labels, "runner_id": runnerID, "runner_name": orNull(j.runnerName),
		"runner_group_id": groupID, "runner_group_name": groupName,
		"workflow_name": j.run.workflow, "head_branch": DefaultHeadBranch,
	}
}

func (s *Server) runnerJSON(r *runner) map[string]any {
	status, osName, version := "offline", "unknown", ""
	if r.online {
		status = "online"
	}
	if r.started {
		osName, version = "Linux", runnerVersion
	}
	var labels []any
	for _, l := range r.allLabels() {
		kind := "custom"
		if strings.EqualFold(l, "self-hosted") {
			kind = "read-only"
		}
		labels = append(labels, map[string]any{"id": s.labelID(l), "name": l, "type": kind})
	}
	return map[string]any{
		"id": r.id, "runner_group_id": cmp.Or(r.group, DefaultRunnerGroupID), "name": r.name, "os": osName,
		"status": status, "busy": r.busy, "ephemeral": r.ephemeral, "version": version, "labels": labels,
	}
}

// labelID gives each label name one id, as GitHub does per scope. Called
// under s.mu.
func (s *Server) labelID(name string) int64 {
	if s.labelIDs == nil {
		s.labelIDs = map[string]int64{}
	}
	key := strings.ToLower(name)
	if id, ok := s.labelIDs[key]; ok {
		return id
	}
	id := int64(len(s.labelIDs) + 1)
	s.labelIDs[key] = id
	return id
}
