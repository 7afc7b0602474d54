// /docs draws Swagger UI and /redoc ReDoc, both vendored (static/vendor). Where their markup trips people who
// navigate by headings and landmarks, attributes are added as they render: Swagger UI skips from its h1 to
// an h3 per tag (an h4 for schemas, h4 and h5 inside an operation), leaves its title and "Authorize" outside
// every landmark and names every responses table alike; ReDoc follows an operation's h2 with h5.
"use strict";

const swagger = document.getElementById("swagger-ui");
if (swagger) {
  window.ui = SwaggerUIBundle({
    url: swagger.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: false, // a deep link inside each operation's toggle button would nest controls
    showExtensions: true,
    showCommonExtensions: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
}

const ATTRIBUTES = {
  ".swagger-ui h3.opblock-tag, .swagger-ui .models h4": { "aria-level": "2" },
  ".swagger-ui .opblock-body h4": { "aria-level": "3" },
  ".swagger-ui .opblock-body h5": { "aria-level": "4" },
  ".swagger-ui .information-container": { role: "region", "aria-label": "About the API" },
  ".swagger-ui .scheme-container": { role: "region", "aria-label": "Authorization" },
  ".swagger-ui .body-param textarea": { "aria-label": "Request body" },
  "redoc h5": { "aria-level": "3" },
};

// Each operation's responses table is a region: named after its operation, so that regions differ.
function operationName(element) {
  const block = element.closest(".opblock");
  const part = (name) => block.querySelector(name)?.textContent.trim() ?? "";
  return `${part(".opblock-summary-method")} ${part(".opblock-summary-path")}`;
}

function fixMarkup() {
  for (const [selector, attributes] of Object.entries(ATTRIBUTES)) {
    for (const element of document.querySelectorAll(selector)) {
      for (const [name, value] of Object.entries(attributes)) {
        if (element.getAttribute(name) !== value) element.setAttribute(name, value);
      }
    }
  }
  for (const table of document.querySelectorAll(".swagger-ui .opblock .responses-table[role=region]:not([aria-label])")) {
    table.setAttribute("aria-label", `Responses of ${operationName(table)}`);
  }
}
new MutationObserver(fixMarkup).observe(document.getElementById("main"), { childList: true, subtree: true });
