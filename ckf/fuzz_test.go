package ckf

// Fuzz targets (go test -fuzz=FuzzX -fuzztime=10s ./ckf/):
//   FuzzConfigValidate        CkfConfig.Validate / BucketCountFor;
//   FuzzIdentityMaterial      identity material decoding (and round trip);
//   FuzzExplicitEntries       explicit-map validation.

import (
	"bytes"
	"errors"
	"math/bits"
	"testing"
)

func FuzzConfigValidate(f *testing.F) {
	f.Add(uint64(1), uint64(500), uint64(2), uint64(1))
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(^uint64(0), uint64(4097), uint64(9), uint64(3))
	f.Fuzz(func(t *testing.T, n, kicks, window, every uint64) {
		c := CkfConfig{ExpectedBlocksPerDC: n, Seed: n ^ kicks, MaxKicks: kicks, VerificationWindow: window, PublishEveryNEvents: every}
		err := c.Validate()
		var be *BuildError
		switch {
		case n == 0:
			if !errors.As(err, &be) || be.Kind != BuildExpectedCapacityZero {
				t.Fatalf("n=0: %v", err)
			}
		case kicks < 1 || kicks > MaxKicks:
			if !errors.As(err, &be) || be.Kind != BuildInvalidMaxKicks || be.Value != kicks {
				t.Fatalf("kicks %d: %v", kicks, err)
			}
		case window < 1 || window > MaxVerificationWindow:
			if !errors.As(err, &be) || be.Kind != BuildInvalidVerificationWindow || be.Value != window {
				t.Fatalf("window %d: %v", window, err)
			}
		case every == 0:
			if !errors.Is(err, ErrInvalidPublishEveryNEvents) {
				t.Fatalf("every 0: %v", err)
			}
		default:
			if err != nil {
				t.Fatalf("valid config rejected: %v", err)
			}
		}
		bc, err := BucketCountFor(n)
		if n == 0 {
			if !errors.Is(err, ErrExpectedCapacityZero) {
				t.Fatal(err)
			}
			return
		}
		hi, lo := bits.Mul64(n, 5)
		if hi != 0 || lo > ^uint64(0)-15 || (lo+15)/16 > 1<<63 {
			if !errors.Is(err, ErrCapacityOverflow) {
				t.Fatalf("n=%d: want overflow, got %d %v", n, bc, err)
			}
			return
		}
		required := max((lo+15)/16, 2)
		if err != nil || bc < 2 || bc&(bc-1) != 0 || bc < required || bc/2 >= required {
			t.Fatalf("n=%d: bucket count %d (required %d) err %v", n, bc, required, err)
		}
	})
}

func FuzzIdentityMaterial(f *testing.F) {
	m1, _, _ := CacheSemanticsMaterial(MaterialSelection{Explicit: map[string]string{"model": "llama", "tp": "8"}}, 64, 1)
	m2, _, _ := RoutingScopeMaterial(MaterialSelection{Defaults: []string{"a", "bb"}})
	f.Add(m1)
	f.Add(m2)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeIdentityMaterial(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidIdentityMaterial) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		var re []byte
		var src IdentitySource
		if m.Kind == MaterialCacheSemantics {
			re, src, err = CacheSemanticsMaterial(m.Selection, m.KvBlockSize, m.EventHashFormat)
		} else {
			re, src, err = RoutingScopeMaterial(m.Selection)
		}
		if err != nil || src != m.Source || !bytes.Equal(re, data) {
			t.Fatalf("round trip: err %v src %v equal %v", err, src, bytes.Equal(re, data))
		}
	})
}

func FuzzExplicitEntries(f *testing.F) {
	f.Add("k", "v", "k", "w")
	f.Add("", "v", "a", "b")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		m, err := DecodeExplicitEntries([]ExplicitEntry{{k1, v1}, {k2, v2}})
		if k1 == k2 {
			if err == nil {
				t.Fatal("duplicate keys accepted")
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidIdentityMaterial) {
				t.Fatal(err)
			}
			return
		}
		if ValidateExplicitEntries(m) != nil || len(m) != 2 {
			t.Fatal("decoded map invalid")
		}
	})
}
