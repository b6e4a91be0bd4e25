package controller

import (
	"context"
	"fmt"
	"sync"
)

// Together runs several controllers as one, under the first one's name and
// so its Lease: for loops that need what only the others have while they
// lead (the pool manager reads the claims that wait in the leading
// provisioner). Run returns when ctx is done or the first of them fails,
// which stops the rest.
func Together(first Runnable, rest ...Runnable) Runnable {
	return together(append([]Runnable{first}, rest...))
}

type together []Runnable

func (t together) Name() string { return t[0].Name() }

func (t together) Run(ctx context.Context) error {
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
				once.Do(func() { first = fmt.Errorf("%s: %w", r.Name(), err) })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}
