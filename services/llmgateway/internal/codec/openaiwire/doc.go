// Package openaiwire holds what the two OpenAI codecs (openai-chat and
// openai-responses) share: OpenAI-style error classification and request
// plumbing (auth, extra headers).
package openaiwire
