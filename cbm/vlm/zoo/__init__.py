"""The known-faithfulness testbed: tiny VLMs trained here on synthetic robots with a planted
reliance (on the label rule's parts, on a spurious cue, or a measured mixture), the exact
ground truth of that reliance, and EDCT with the exact judge scored against it."""
