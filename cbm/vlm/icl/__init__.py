"""Few-shot in-context explanation study (``cbm-icl``): N-way K-shot episodes, explanation
conditions E1-E5, an LLM judge, statistics, and a checker for Description-Logic explanations."""
