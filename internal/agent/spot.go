package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// InstanceAction is EC2's notice that it is taking the machine back: a
// spot interruption, two minutes ahead.
type InstanceAction struct {
	Action string `json:"action"` // terminate, stop or hibernate
	Time   string `json:"time"`
}

// SpotNotice reads EC2's spot interruption notice from IMDSv2: nil (and
// no error) while there is none.
func SpotNotice(ctx context.Context, hc *http.Client, base string) (*InstanceAction, error) {
	vals, err := imdsGet(ctx, hc, strings.TrimRight(base, "/"), "meta-data/spot/instance-action")
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var act InstanceAction
	if err := json.Unmarshal([]byte(vals[0]), &act); err != nil {
		return nil, fmt.Errorf("the spot notice is not JSON: %w", err)
	}
	return &act, nil
}

// watchSpot polls the metadata service for a spot interruption notice and,
// on one, tells the control plane once (retrying until it is heard), which
// takes the instance out of service before the machine goes. The agent
// carries on: the control plane ends the instance, and the machine goes
// by itself.
func (a *Agent) watchSpot(ctx context.Context) {
	for {
		act, err := SpotNotice(ctx, a.hc, a.cfg.MetadataURL)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			a.log.Debug("spot notice unreadable", "err", err)
		case act != nil:
			a.log.Warn("spot interruption notice: the cloud is taking the machine back", "action", act.Action, "at", act.Time)
			err := a.signal(ctx, agentapi.SignalRequest{Kind: string(domain.SignalInterrupted), Reason: act.Action + " at " + act.Time})
			switch {
			case errors.Is(err, ErrInstanceEnded):
				a.log.Info("the instance had already ended: nothing to report")
			case err != nil && ctx.Err() == nil:
				a.log.Warn("the control plane did not hear of the interruption", "err", err)
			}
			return
		}
		if a.sleep(ctx, a.cfg.SpotWatchEvery) != nil {
			return
		}
	}
}
