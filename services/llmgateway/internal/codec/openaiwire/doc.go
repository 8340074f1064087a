// Package openaiwire holds what the two OpenAI codecs (openai-chat and
// openai-responses) share: a validating
// in-place JSON scanner for the hot stream chunks, OpenAI-style error
// classification, and request plumbing (auth, extra headers).
package openaiwire
