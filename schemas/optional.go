package schemas

// Optional is a value that may be absent; it maps to an Avro union of null
// and the value's type.
type Optional[T any] struct {
	Value T
	Valid bool
}

// Some returns a present Optional holding v.
func Some[T any](v T) Optional[T] { return Optional[T]{Value: v, Valid: true} }

// Get returns the value and whether it is present.
func (o Optional[T]) Get() (T, bool) { return o.Value, o.Valid }
