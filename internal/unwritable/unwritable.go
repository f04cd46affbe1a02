// Package unwritable makes a test directory tree one that nothing can be
// created in, for tests of what floe does without write access to a
// table's files.
package unwritable

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Dir makes dir and every directory below it refuse new entries until tb
// ends or restore is called: by their mode, or, for root, whom modes do not
// stop (tests often run as root in containers), by the immutable attribute
// (chattr +i: creating an entry fails with EPERM). It skips tb where
// neither takes effect.
func Dir(tb testing.TB, dir string) (restore func()) {
	tb.Helper()
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	lock, unlock := func(d string) error { return os.Chmod(d, 0o555) }, func(d string) { _ = os.Chmod(d, 0o755) }
	if os.Geteuid() == 0 {
		lock = func(d string) error {
			if out, err := exec.Command("chattr", "+i", d).CombinedOutput(); err != nil {
				tb.Skipf("running as root, and chattr +i %s: %v %s", d, err, out)
			}
			return nil
		}
		unlock = func(d string) { _ = exec.Command("chattr", "-i", d).Run() }
	}
	// TempDir's clean-up cannot remove an immutable directory's entries.
	restore = sync.OnceFunc(func() {
		for _, d := range dirs {
			unlock(d)
		}
	})
	tb.Cleanup(restore)
	for _, d := range dirs {
		if err := lock(d); err != nil {
			tb.Fatal(err)
		}
	}
	probe := filepath.Join(dirs[len(dirs)-1], "probe")
	if err := os.WriteFile(probe, nil, 0o644); err == nil {
		os.Remove(probe)
		tb.Skipf("%s is still writable", filepath.Dir(probe))
	}
	return restore
}
