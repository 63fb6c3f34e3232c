-- Console sessions and the failed-authentication limit, shared by every
-- instance and kept across restarts (ARCHITECTURE.md, "External contract").

-- A console session. The browser holds a random id; only its SHA-256 is
-- stored, so a read of this table signs nobody in. Nor is the operator's
-- token stored: its SHA-256 finds it among the configured role tokens at
-- each request, and a token taken out of the configuration ends its
-- sessions there. roles and name are what GET /v1/me answered at sign-in.
-- flash holds the messages the next page shows (an action's outcome shown
-- after its redirect, which another instance may serve).
CREATE TABLE console_sessions (
    id_hash    bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    token_hash bytea NOT NULL CHECK (length(token_hash) = 32),
    ops        boolean NOT NULL,
    finance    boolean NOT NULL,
    name       text NOT NULL,
    flash      jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
-- Expired sessions are deleted at each sign-in.
CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);

-- Failed authentications (a wrong token on /v1 or at console sign-in) per
-- client address (an IPv4 address or an IPv6 /64). A window starts at an
-- address's first failure and lasts the configured window (a minute);
-- past the limit within it, the address is refused until it ends. Only
-- failures write here; windows long over are deleted on the failure path.
CREATE TABLE auth_failures (
    addr         text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    failures     integer NOT NULL CHECK (failures > 0)
);
