package controller

import (
	"context"
	"fmt"
	"sync"
)

// Together runs several controllers as one, under the first one's name and
// so its Lease: for loops that need what only the others have while they
// lead (the pool manager reads the claims that wait in the leading
// provisioner). Run first starts, in order, each one that has a Start
// (Starter), and runs none if one fails; then it runs them all until ctx is
// done or the first of them fails, which stops the rest.
func Together(first Runnable, rest ...Runnable) Runnable {
	return together(append([]Runnable{first}, rest...))
}

type together []Runnable

func (t together) Name() string { return t[0].Name() }

// Starter is a controller with something to start before any controller
// run beside it (Together) may rely on it.
type Starter interface {
	Start(ctx context.Context) error
}

func (t together) Run(ctx context.Context) error {
	for _, r := range t {
		if s, ok := r.(Starter); ok {
			if err := s.Start(ctx); err != nil {
				return t.wrap(r, err)
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, r := range t {
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				once.Do(func() { first = t.wrap(r, err) })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// wrap names r in err, unless r names the group: the process names the
// group already.
func (t together) wrap(r Runnable, err error) error {
	if r.Name() == t.Name() {
		return err
	}
	return fmt.Errorf("%s: %w", r.Name(), err)
}
