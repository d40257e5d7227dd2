#include "widgets.hpp"

#include <QComboBox>
#include <QHeaderView>
#include <QLabel>
#include <QSpinBox>
#include <QTableView>

#include "preflight/planner/plan_schema.hpp"

namespace preflight::gui {

QString sv(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

void fillChoices(QComboBox* box, std::string_view key) {
    const auto& choices = plan_field(key)->choices;
    for (std::size_t i = 0; i < choices.size(); ++i)
        box->addItem(QString::fromStdString(choices[i]), static_cast<int>(i));
}

void fillStages(QComboBox* box, std::string_view key) {
    const PlanField* f = plan_field(key);
    for (auto z = f->min; z <= f->max; ++z) box->addItem(QStringLiteral("ZeRO-%1").arg(z), static_cast<int>(z));
}

QSpinBox* spin(const char* name, int lo, int hi, int value, int step) {
    auto* s = new QSpinBox;
    s->setObjectName(QString::fromLatin1(name));
    s->setRange(lo, hi);
    s->setSingleStep(step);
    s->setValue(value);
    s->setGroupSeparatorShown(true);
    s->setKeyboardTracking(false);  // typing "4096" evaluates once, not for 4, 40, 409
    return s;
}

QTableView* table(const char* name, QAbstractItemModel* model) {
    auto* v = new QTableView;
    v->setObjectName(QString::fromLatin1(name));
    v->setModel(model);
    v->setAlternatingRowColors(true);
    v->setSelectionBehavior(QAbstractItemView::SelectRows);
    v->setEditTriggers(QAbstractItemView::NoEditTriggers);
    v->verticalHeader()->setVisible(false);
    v->verticalHeader()->setDefaultSectionSize(22);
    v->horizontalHeader()->setHighlightSections(false);
    return v;
}

QLabel* value_label(const char* name, bool big) {
    auto* l = new QLabel;
    l->setObjectName(QString::fromLatin1(name));
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    if (big) {
        QFont f = l->font();
        f.setPointSizeF(f.pointSizeF() * 1.45);
        f.setBold(true);
        l->setFont(f);
    }
    return l;
}

}  // namespace preflight::gui
