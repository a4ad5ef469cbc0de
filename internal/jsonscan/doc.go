// Package jsonscan reads top-level members of a JSON object by name
// without decoding the rest: the values before a member are skipped by a
// scanner that checks their syntax but builds nothing, and the member's
// value is returned as the document's own bytes. It is what a request's
// path reads of a body (the model it names, whether it streams, an image
// job's client_id) when encoding/json would cost microseconds and dozens
// of allocations per request.
//
// Member does not allocate. A string value is read with Unquote (no
// allocation unless it has escapes), String (one copy) or Equal (none);
// a literal with Bool or IsNull. Object says whether a whole document is
// a well-formed object, for a caller that must tell an absent member from
// a body it cannot read.
//
// What it answers is what encoding/json answers for the same member, or
// nothing:
//   - The document must be well-formed up to the end of the member's
//     value; anything malformed before it, or a value cut short, is not
//     found. What follows the member is not read, beyond the next ',' or
//     '}': a body cut after the member (the first bytes of a larger one)
//     still names it, except a number that reaches the end of the bytes
//     (its digits may go on).
//   - Names match as encoding/json's decoder unescapes them, exactly
//     (case-sensitive), and the first member with the name is the one
//     found. encoding/json's Unmarshal, and most engines, keep the last
//     of duplicate names instead: a body that repeats a name is not one
//     a client sends, and scanning past the first to find out would cost
//     every request the rest of its body.
//   - Nesting deeper than encoding/json's limit (10000 levels) is not
//     followed.
package jsonscan
