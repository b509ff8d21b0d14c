package ckf

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseIndexerDomainIDRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		var want IndexerDomainID
		for j := range want.CacheSemantics.Digest {
			want.CacheSemantics.Digest[j] = byte(rng.Uint32())
			want.RoutingScope.Digest[j] = byte(rng.Uint32())
		}
		src := IdentitySource(i % 2)
		want.CacheSemantics.Source, want.RoutingScope.Source = src, src
		got, err := ParseIndexerDomainID(want.String(), src)
		if err != nil || got != want {
			t.Fatalf("ParseIndexerDomainID(%q, %v) = %v, %v; want %v", want.String(), src, got, err, want)
		}
	}
	// Upper-case hex digits parse to the same digests; String renders lower case.
	const lower = "c5000000000000000000000000000000:5c00000000000000000000000000000a"
	got, err := ParseIndexerDomainID(strings.ToUpper(lower), IdentityExplicit)
	if err != nil || got.String() != lower || got.ReliesOnDefaults() {
		t.Fatalf("upper case: %v (%s), %v", got, got, err)
	}
	got, err = ParseIndexerDomainID(lower, IdentityDefaultDerived)
	if err != nil || !got.ReliesOnDefaults() {
		t.Fatalf("default-derived source: %v, %v", got, err)
	}
}

func TestParseIndexerDomainIDRejects(t *testing.T) {
	const d = "c5000000000000000000000000000000"
	for _, s := range []string{
		"",
		d,                     // no colon
		d + ":",               // no routing digest
		":" + d,               // no semantics digest
		d + ":" + d[:31],      // 31 digits
		d + ":" + d + "0",     // 33 digits
		d + ":" + d + ":" + d, // a third part
		"g" + d[1:] + ":" + d, // not hex
		d + " :" + d,          // a space
		"0x" + d[2:] + ":" + d,
	} {
		got, err := ParseIndexerDomainID(s, IdentityExplicit)
		if !errors.Is(err, ErrInvalidIndexerDomain) || got != (IndexerDomainID{}) {
			t.Errorf("ParseIndexerDomainID(%q) = %v, %v; want the zero id and ErrInvalidIndexerDomain", s, got, err)
		}
	}
	if _, err := ParseIndexerDomainID(d+":"+d, IdentitySource(2)); !errors.Is(err, ErrInvalidIndexerDomain) {
		t.Errorf("an invalid identity source: %v", err)
	}
}
