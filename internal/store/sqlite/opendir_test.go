package sqlite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// A store whose directory is missing, not a directory, or not writable is
// refused naming the directory and what is wrong with it, where SQLite
// says only that it cannot open the file.
func TestOpenNamesWhatIsWrongWithTheDirectory(t *testing.T) {
	root := t.TempDir()
	missing := filepath.Join(root, "var", "lib", "bullpen")
	notDir := filepath.Join(root, "plain")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(missing, "bullpen.db"), "directory " + missing + " does not exist: create it (mkdir -p " + missing + ")"},
		{filepath.Join(notDir, "bullpen.db"), notDir + " is not a directory"},
	} {
		s, err := Open(t.Context(), tc.path, clock.NewVirtual(epoch))
		if err == nil {
			s.Close()
			t.Fatalf("%s opened", tc.path)
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "open sqlite store "+tc.path+": ") {
			t.Errorf("open %s: %v\nwant it to say %q", tc.path, err, tc.want)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("opening a store created its missing directory")
	}

	readOnly := filepath.Join(root, "read-only")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	if f, err := os.CreateTemp(readOnly, "probe"); err == nil {
		// Root writes anywhere, and SQLite would too: nothing to refuse.
		f.Close()
		os.Remove(f.Name())
		t.Log("this user may write to a read-only directory; its refusal is not checked")
	} else {
		_, err := Open(t.Context(), filepath.Join(readOnly, "bullpen.db"), clock.NewVirtual(epoch))
		if err == nil || !strings.Contains(err.Error(), "directory "+readOnly+" is not writable by this user") {
			t.Errorf("open in a read-only directory: %v", err)
		}
	}

	// The trial write leaves nothing behind beside a store that opens.
	ok := t.TempDir()
	openAt(t, filepath.Join(ok, "bullpen.db"), clock.NewVirtual(epoch))
	entries, err := os.ReadDir(ok)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "bullpen.db") {
			t.Errorf("%s left beside the store", e.Name())
		}
	}
}
