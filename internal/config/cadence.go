package config

import (
	"errors"
	"time"

	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// CheckCadence is autoscale.CheckCadence for pools of c, each problem
// placed at its pool's autoscale block: a converger cycling every would
// poll those blocks too seldom for them ever to scale, which the file
// alone cannot show. It returns nil when every block can scale; otherwise
// an error that is, for errors.As, both the placed problems (Errors, as
// Parse reports them) and the *autoscale.CadenceError, so that a caller
// can say where and still tell this refusal from others.
func (c *Config) CheckCadence(pools []domain.Pool, every time.Duration) error {
	var placed Errors
	var all autoscale.CadenceError
	for _, p := range pools {
		var cadence *autoscale.CadenceError
		if !errors.As(autoscale.CheckCadence([]domain.Pool{p}, every), &cadence) {
			continue
		}
		at, ok := c.autoscaleAt[p.Name]
		if !ok {
			at = position{1, 1} // a configuration not read from a file
		}
		for _, msg := range cadence.Problems {
			placed = append(placed, Error{File: c.file, Line: at.line, Col: at.col, Msg: msg})
		}
		all.Problems = append(all.Problems, cadence.Problems...)
	}
	if len(placed) == 0 {
		return nil
	}
	placed.sort()
	return &cadenceRefusal{placed: placed, cause: &all}
}

// cadenceRefusal reads as its placed problems and unwraps to them and to
// the cadence error they come from.
type cadenceRefusal struct {
	placed Errors
	cause  *autoscale.CadenceError
}

func (e *cadenceRefusal) Error() string   { return e.placed.Error() }
func (e *cadenceRefusal) Unwrap() []error { return []error{e.placed, e.cause} }
