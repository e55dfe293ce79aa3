-- Pausing a source; see the PostgreSQL migration of the same name. The start rule's pause check
-- is in Rust (`job::start_gate`), in the starting transaction.

CREATE TABLE source_pauses (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    source        TEXT NOT NULL,
    paused_at     TEXT NOT NULL,
    paused_by     TEXT NOT NULL CHECK (paused_by <> ''),
    pause_reason  TEXT NOT NULL CHECK (pause_reason <> ''),
    resumed_at    TEXT,
    resumed_by    TEXT CHECK (resumed_by <> ''),
    resume_reason TEXT CHECK (resume_reason <> ''),
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL) AND (resumed_at IS NULL) = (resume_reason IS NULL))
);

CREATE UNIQUE INDEX source_pauses_in_force ON source_pauses (source) WHERE resumed_at IS NULL;

CREATE TRIGGER source_pauses_only_resumed BEFORE UPDATE ON source_pauses
WHEN OLD.resumed_at IS NOT NULL OR NEW.id IS NOT OLD.id OR NEW.source IS NOT OLD.source
  OR NEW.paused_at IS NOT OLD.paused_at OR NEW.paused_by IS NOT OLD.paused_by
  OR NEW.pause_reason IS NOT OLD.pause_reason
BEGIN
    SELECT RAISE(ABORT, 'a source pause is only ever resumed, once: UPDATE refused');
END;
CREATE TRIGGER source_pauses_no_delete BEFORE DELETE ON source_pauses
BEGIN
    SELECT RAISE(ABORT, 'source pauses are never deleted: DELETE refused');
END;
