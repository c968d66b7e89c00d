package domain

import (
	"fmt"
	"strconv"
	"strings"
)

// RunnerName names the just-in-time runner of one job on one instance,
// "<instance id>-<job id>", so that GitHub's report of the runner that took
// a job says which instance runs it.
func RunnerName(instanceID string, jobID int64) string {
	return fmt.Sprintf("%s-%d", instanceID, jobID)
}

// ParseRunnerName reads a name RunnerName made (instance ids start "bp-").
func ParseRunnerName(name string) (instanceID string, jobID int64, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= len("bp-") || i == len(name)-1 || !strings.HasPrefix(name, "bp-") {
		return "", 0, false
	}
	id, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || id <= 0 {
		return "", 0, false
	}
	return name[:i], id, true
}
