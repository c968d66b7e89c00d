package agents

import (
	"sync"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Notices fans the news that an instance has something new to do (a job to
// run, a release) out to every agent transport: the HTTP agent API's long
// polls, the simulated agents. It is built before the service and the
// transports, so that each is given it when it is built: transports
// subscribe, the service publishes.
type Notices struct {
	mu   sync.RWMutex
	subs []domain.AssignmentNotifier
}

var _ domain.AssignmentNotifier = (*Notices)(nil)

// Subscribe adds a transport to tell.
func (n *Notices) Subscribe(s domain.AssignmentNotifier) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subs = append(n.subs, s)
}

// Assigned tells every transport that the instance with that cloud id has
// news.
func (n *Notices) Assigned(cloudID string) {
	if cloudID == "" {
		return
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, s := range n.subs {
		s.Assigned(cloudID)
	}
}
