package ckf

import (
	"testing"
)

func TestSearchConfigValidate(t *testing.T) {
	for w := -1; w <= 9; w++ {
		err := SearchConfig{VerificationWindow: w}.Validate()
		if (w >= 1 && w <= 8) != (err == nil) {
			t.Fatalf("w=%d err=%v", w, err)
		}
	}
	if DefaultSearchConfig().VerificationWindow != 2 {
		t.Fatal("default window")
	}
}
