package config

import "errors"

// ErrInvalid marks the errors of Add and Remove that their input caused (a
// bad prefix, a list over capacity, a prefix not listed): nothing changed.
var ErrInvalid = errors.New("invalid list change")

// Invalid returns err marked as the input's fault: errors.Is(err,
// ErrInvalid) holds, and its text is err's.
func Invalid(err error) error { return inputError{err} }

// inputError is an error that errors.Is(err, ErrInvalid), with its own text.
type inputError struct{ error }

func (inputError) Is(target error) bool { return target == ErrInvalid }
