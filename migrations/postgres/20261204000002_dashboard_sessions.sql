-- Dashboard sessions, shared by every operator process and kept across restarts. The session id
-- is only in the browser's cookie; the row is keyed by its SHA-256.
CREATE TABLE dashboard_sessions (
    id_sha256  TEXT PRIMARY KEY CHECK (id_sha256 ~ '^[0-9a-f]{64}$'),
    -- The token's name and role the session was opened with.
    actor      TEXT NOT NULL CHECK (actor <> ''),
    role       TEXT NOT NULL CHECK (role IN ('ops', 'finance')),
    csrf       TEXT NOT NULL CHECK (length(csrf) >= 32),
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL CHECK (expires_at > created_at)
);

CREATE INDEX dashboard_sessions_actor ON dashboard_sessions (actor);
CREATE INDEX dashboard_sessions_expires_at ON dashboard_sessions (expires_at);
