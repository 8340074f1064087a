package bus

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Bounds of the per-session credentials (IssueCredential).
const (
	// MaxCredentialSessions is how many sessions one credential may read.
	MaxCredentialSessions = 32
	// MaxCredentialsPerPrincipal bounds a principal's unexpired
	// credentials, and so its connections' lifetimes to track.
	MaxCredentialsPerPrincipal = 8
)

// Errors of IssueCredential.
var (
	// ErrNotEmbedded: the events are on an external server, or the
	// embedded one accepts in-process connections only.
	ErrNotEmbedded = errors.New("bus: no embedded NATS listener to issue a credential of")
	// ErrCredentialLimit: the principal holds MaxCredentialsPerPrincipal
	// unexpired credentials.
	ErrCredentialLimit = errors.New("bus: too many unexpired events credentials")
)

// Credential is a user of the embedded server that reads the events of
// some sessions only.
type Credential struct {
	User, Password string
	// InboxPrefix is the only inbox the user may subscribe under: another
	// user's replies never reach it, nor its replies another user.
	InboxPrefix string
	// Subjects are the subjects it may subscribe to.
	Subjects []string
	Expires  time.Time
}

// grant is an issued credential as the authenticator keeps it.
type grant struct {
	principal string
	tokenID   string            // of the fabro token it was issued to; "" for none
	hash      [sha256.Size]byte // of the password
	perms     *server.Permissions
	expires   time.Time
}

// authenticator decides every client connection of the embedded server.
// nkeys is fixed before the server starts; grants change under mu.
type authenticator struct {
	nkeys map[string]*server.Permissions // public key: permissions (nil: all)
	now   func() time.Time

	mu     sync.Mutex
	grants map[string]*grant // by user name
	// revoked are the users of revoked grants until they would have
	// expired: a connection authenticated just before its grant went is
	// closed at the next RevokeCredentials.
	revoked map[string]time.Time
}

func newAuthenticator() *authenticator {
	return &authenticator{nkeys: map[string]*server.Permissions{}, grants: map[string]*grant{}, revoked: map[string]time.Time{}, now: time.Now}
}

var _ server.Authentication = (*authenticator)(nil)

// Check implements server.Authentication: an nkey it knows that signed
// the connection's nonce, or an unexpired user with its password. Routes,
// leaf nodes and anything else are refused.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	switch {
	case o.Nkey != "" && o.Username == "" && o.Password == "" && o.Token == "" && o.JWT == "":
		perms, ok := a.nkeys[o.Nkey]
		if !ok || !signedNonce(o.Nkey, o.Sig, c.GetNonce()) {
			return false
		}
		c.RegisterUser(&server.User{Username: o.Nkey, Permissions: perms})
		return true
	case o.Username != "" && o.Nkey == "" && o.Token == "" && o.JWT == "":
		g := a.lookup(o.Username, o.Password)
		if g == nil {
			return false
		}
		// The server closes the connection when the credential lapses.
		c.RegisterUser(&server.User{Username: o.Username, Permissions: g.perms, ConnectionDeadline: g.expires})
		return true
	}
	return false
}

// signedNonce reports whether sig (base64) is pub's signature of nonce.
func signedNonce(pub, sig string, nonce []byte) bool {
	if len(nonce) == 0 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if raw, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	kp, err := nkeys.FromPublicKey(pub)
	return err == nil && kp.Verify(nonce, raw) == nil
}

// lookup is the unexpired grant of user whose password is password.
func (a *authenticator) lookup(user, password string) *grant {
	sum := sha256.Sum256([]byte(password))
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.grants[user]
	if g == nil || !a.now().Before(g.expires) || subtle.ConstantTimeCompare(sum[:], g.hash[:]) != 1 {
		return nil
	}
	return g
}

// issue makes a credential of principal, issued to the fabro token of id
// tokenID, that reads sessionIDs until ttl from now.
func (a *authenticator) issue(principal, tokenID string, sessionIDs []string, ttl time.Duration) (Credential, error) {
	if len(sessionIDs) == 0 || len(sessionIDs) > MaxCredentialSessions {
		return Credential{}, fmt.Errorf("bus: a credential reads 1 to %d sessions, not %d", MaxCredentialSessions, len(sessionIDs))
	}
	for _, id := range sessionIDs {
		if !validToken(id) {
			return Credential{}, fmt.Errorf("bus: session id %q is not a subject token", id)
		}
	}
	if ttl <= 0 {
		return Credential{}, errors.New("bus: a credential needs a positive lifetime")
	}
	var rnd [8 + 32]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return Credential{}, err
	}
	now := a.now()
	cred := Credential{
		User:     "ev" + hex.EncodeToString(rnd[:8]),
		Password: base64.RawURLEncoding.EncodeToString(rnd[8:]),
		Expires:  now.Add(ttl),
	}
	cred.InboxPrefix = "_INBOX_" + cred.User
	for _, id := range sessionIDs {
		cred.Subjects = append(cred.Subjects, SessionFilter(id), jsonSessionFilter(id))
	}
	g := &grant{principal: principal, tokenID: tokenID, hash: sha256.Sum256([]byte(cred.Password)), perms: sessionPermissions(cred), expires: cred.Expires}

	a.mu.Lock()
	defer a.mu.Unlock()
	held := 0
	for user, o := range a.grants {
		switch {
		case !now.Before(o.expires):
			delete(a.grants, user) // its connections were closed at expiry
		case o.principal == principal:
			held++
		}
	}
	if held >= MaxCredentialsPerPrincipal {
		return Credential{}, ErrCredentialLimit
	}
	a.grants[cred.User] = g
	return cred, nil
}

// jsonSessionFilter matches every JSON event message of one session.
func jsonSessionFilter(sessionID string) string {
	return JSONSubjectPrefix + sessionID + ".events.>"
}

// validToken reports whether s can be one token of a subject.
func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n\x00")
}

// sessionPermissions let cred's user read its sessions' live events and
// nothing else: core subscriptions to those sessions' subjects (both
// encodings) and its own inbox; a wider subscription, another session's
// subject or inbox, is a permissions violation.
//
// It publishes nothing at all, so no JetStream API either: nats-server
// checks neither a push consumer's deliver_subject nor a request's reply
// subject against the sender's permissions, so any consumer or pull
// request of a user could write into another user's live subject or inbox
// (tried: issue 18). With nothing to publish there is nothing to set a
// reply subject on. Stored events are replayed through
// AgentService.StreamEvents, which checks the session's owner.
func sessionPermissions(cred Credential) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Deny: []string{">"}},
		Subscribe: &server.SubjectPermission{Allow: append([]string{cred.InboxPrefix + ".>"}, cred.Subjects...)},
	}
}

// IssueCredential makes a user of the embedded server that reads the
// events of sessionIDs (at most MaxCredentialSessions) until ttl from now,
// for principal, who holds at most MaxCredentialsPerPrincipal at once,
// issued to the fabro token of id tokenID (RevokeCredentials ends it with
// that token). Whether principal may read those sessions is the caller's
// check. ErrNotEmbedded with an external server or no listener.
func (b *Bus) IssueCredential(principal, tokenID string, sessionIDs []string, ttl time.Duration) (Credential, error) {
	if b.auth == nil || b.sopts == nil || b.sopts.DontListen {
		return Credential{}, ErrNotEmbedded
	}
	return b.auth.issue(principal, tokenID, sessionIDs, ttl)
}

// RevokeCredentials ends every credential issued to a fabro token that
// issued no longer reports (revoked): it is forgotten, so it connects no
// more, and its open connections are closed, so a revoked token's event
// subscriptions end as its gRPC streams do. It returns how many it
// revoked now.
func (b *Bus) RevokeCredentials(issued func(tokenID string) bool) int {
	if b.auth == nil {
		return 0
	}
	users, fresh := b.auth.revoke(issued)
	for _, user := range users {
		b.disconnect(user)
	}
	return fresh
}

// revoke forgets the grants whose token issued does not report, and
// returns the user names of every revoked grant not yet expired, and how
// many it revoked now. issued is asked outside the lock, once per token:
// it may read a file.
func (a *authenticator) revoke(issued func(tokenID string) bool) (users []string, fresh int) {
	a.mu.Lock()
	ids := map[string]bool{}
	for _, g := range a.grants {
		if g.tokenID != "" {
			ids[g.tokenID] = true
		}
	}
	a.mu.Unlock()
	gone := map[string]bool{}
	for id := range ids {
		if !issued(id) {
			gone[id] = true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for user, g := range a.grants {
		if gone[g.tokenID] {
			delete(a.grants, user)
			a.revoked[user] = g.expires
			fresh++
		}
	}
	now := a.now()
	for user, exp := range a.revoked {
		if !now.Before(exp) {
			delete(a.revoked, user) // the server closed its connections at expiry
			continue
		}
		users = append(users, user)
	}
	return users, fresh
}

// disconnect closes the open connections of user.
func (b *Bus) disconnect(user string) {
	if b.ns == nil {
		return
	}
	cz, err := b.ns.Connz(&server.ConnzOptions{User: user, Limit: 1 << 16})
	if err != nil {
		b.logger.Warn("list an events credential's connections", "nats_user", user, "error", err)
		return
	}
	for _, c := range cz.Conns {
		_ = b.ns.DisconnectClientByID(c.Cid) // gone already, or now
	}
}
