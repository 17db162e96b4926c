"""The VLM wing's commands: ``cbm-edct``, ``cbm-finetune``, ``cbm-icl``, ``cbm-vlm-zoo`` and
``cbm-concepts``. They stand on the ground floor (``cbm.core``) and the data (``synthetic``), never on
the CBM stack."""
