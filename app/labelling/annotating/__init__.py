"""The annotator's hot path: who is asking (caller), which image comes next (queue), answers, flags, skip
and undo, the question's text in their language, and the annotator's API (router) and pages."""
