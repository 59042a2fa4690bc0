// The launch form shows only the fields the current choices use: the data source's own fields, and the LoRA
// settings while LoRA is on. Hidden fields still post their values; the server validates whatever is sent.
(() => {
  const form = document.getElementById("launch-form");
  if (!form) return;
  const sourceFields = {
    level: ["arithmetic"],
    size: ["arithmetic"],
    project: ["project_pairs", "project_prompts"],
    aggregation: ["project_pairs"],
    upload: ["upload"],
  };
  const loraFields = ["lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"];

  function setShown(name, shown) {
    const field = form.elements[name]?.closest(".field");
    // a field with an error stays in sight whatever the choices
    if (field) field.hidden = !shown && !field.classList.contains("invalid");
  }

  function update() {
    const source = form.elements.data_source.value;
    for (const [name, sources] of Object.entries(sourceFields)) setShown(name, sources.includes(source));
    const lora = form.elements.use_lora;
    for (const name of loraFields) setShown(name, !lora || lora.checked);
  }

  // Limits left empty follow others (trainer/config.py, derived_max_prompt_length and overlong_buffer): the
  // placeholder shows what the trainer will use, as the limits they follow are typed.
  const number = (name) => Number.parseInt(form.elements[name]?.value, 10);
  const derived = {
    max_prompt_length: () => (form.elements.max_new_tokens
      ? number("max_length") - number("max_new_tokens") : Math.floor(number("max_length") / 2)),
    overlong_buffer: () => Math.max(1, Math.floor(number("max_new_tokens") / 4)),
  };

  function showDerived() {
    for (const [name, value] of Object.entries(derived)) {
      const input = form.elements[name];
      const shown = value();
      if (input) input.placeholder = Number.isFinite(shown) ? `${shown} when empty` : "";
    }
  }

  form.addEventListener("change", (event) => {
    if (["data_source", "use_lora"].includes(event.target.name)) update();
  });
  form.addEventListener("input", showDerived);
  update();
  showDerived();

  // A refused launch: the summary of errors is read first, and each of its links opens the field's section and
  // puts the cursor in the field.
  const summary = document.getElementById("launch-errors");
  summary?.focus();
  summary?.addEventListener("click", (event) => {
    const link = event.target.closest("a[href^='#']");
    const field = link && document.getElementById(link.hash.slice(1));
    if (!field) return;
    event.preventDefault();
    const section = field.closest("details");
    if (section) section.open = true;
    field.closest(".field").hidden = false;
    field.focus();
    field.scrollIntoView({ block: "center" });
  });
})();
