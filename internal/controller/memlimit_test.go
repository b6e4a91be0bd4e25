package controller

import "testing"

func TestSoftMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    int64
		wantErr bool
	}{
		{name: "no limit given", env: map[string]string{}, want: 0},
		{name: "256Mi", env: map[string]string{EnvMemoryLimit: "268435456"}, want: 241591910},
		{name: "spaces around", env: map[string]string{EnvMemoryLimit: " 1000\n"}, want: 900},
		{name: "GOMEMLIMIT wins", env: map[string]string{EnvMemoryLimit: "268435456", "GOMEMLIMIT": "50MiB"}, want: 0},
		{name: "a quantity, not bytes", env: map[string]string{EnvMemoryLimit: "256Mi"}, wantErr: true},
		{name: "zero", env: map[string]string{EnvMemoryLimit: "0"}, wantErr: true},
		{name: "negative", env: map[string]string{EnvMemoryLimit: "-1"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SoftMemoryLimit(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("limit = %d, want %d", got, tc.want)
			}
		})
	}
}
