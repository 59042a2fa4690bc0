// The launch form shows only the fields the current choices use: the data source's own fields, and the LoRA
// settings while LoRA is on. Hidden fields still post their values; the server validates whatever is sent.
(() => {
  const form = document.getElementById("launch-form");
  if (!form) return;
  const sourceFields = {
    level: ["arithmetic"],
    size: ["arithmetic"],
    project: ["project_pairs", "project_prompts"],
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

  form.addEventListener("change", (event) => {
    if (["data_source", "use_lora"].includes(event.target.name)) update();
  });
  update();
})();
