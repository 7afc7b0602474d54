"""Quality control: the checks run on each submission and the flags and pauses they raise (quality, checks),
gold questions, annotators as an admin manages them (pause, exclusion, progress), adjudication of contested
labels, and the work records that pay annotators."""
