package webhook

import (
	"encoding/json"
	"net/http"
)

// EventPush is a push to a repository: bullpen reads its configuration
// again at once when the push is to the repository that holds it.
const EventPush = "push"

// Push is what bullpen reads of a push delivery.
type Push struct {
	Repo          string // OWNER/NAME
	Ref           string // refs/heads/BRANCH or refs/tags/TAG
	DefaultBranch string
}

// push tells Options.OnPush of a signed push delivery. A payload cut at
// MaxPayload is not parsed: the next periodic read finds the change.
func (h *Handler) push(b body) response {
	ignored := response{status: http.StatusAccepted, outcome: OutcomeIgnored, body: map[string]string{"ignored": EventPush}}
	if h.opts.OnPush == nil || !b.complete() {
		return ignored
	}
	var p struct {
		Ref        string `json:"ref"`
		Repository struct {
			FullName      string `json:"full_name"`
			DefaultBranch string `json:"default_branch"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(b.kept, &p); err != nil || p.Repository.FullName == "" || p.Ref == "" {
		return refuse(http.StatusBadRequest, OutcomeBadRequest, "a push payload needs ref and repository.full_name")
	}
	h.opts.OnPush(Push{Repo: p.Repository.FullName, Ref: p.Ref, DefaultBranch: p.Repository.DefaultBranch})
	return response{status: http.StatusAccepted, outcome: OutcomeAccepted, body: map[string]string{"accepted": EventPush}}
}
