package dispatch

import (
	"fmt"
	"strconv"
	"strings"
)

// RunnerName names the just-in-time runner of one job on one instance.
func RunnerName(instanceID string, jobID int64) string {
	return fmt.Sprintf("%s-%d", instanceID, jobID)
}

// InstanceOfRunner returns the instance id in a name RunnerName made, so a
// webhook naming the runner that took a job says which instance runs it.
func InstanceOfRunner(name string) (string, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= len("bp-") || i == len(name)-1 {
		return "", false
	}
	if _, err := strconv.ParseInt(name[i+1:], 10, 64); err != nil || !strings.HasPrefix(name, "bp-") {
		return "", false
	}
	return name[:i], true
}
